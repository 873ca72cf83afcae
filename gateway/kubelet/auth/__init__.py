"""Who the kubelet server is, and who is calling it: serving identity and request auth.

* ``access`` — authentication (client certificate, ``TokenReview``, anonymous) and
  authorization (``SubjectAccessReview`` on ``nodes/<subresource>``), with their caches.
* ``certs`` — ``CertStore``: the serving certificate (files reloaded on change, or
  self-signed) and the client CA, as a fresh SSL context for every connection.
* ``csr`` — ``ServingCertManager``: the serving certificate from a ``kubelet-serving``
  CertificateSigningRequest (docs/design/kubelet-csr.md), written where ``CertStore`` reads.

The three are independent of each other (.importlinter, ``kubelet-auth-independent``) and
import nothing else of ``gateway.kubelet``: the HTTP server (``gateway.kubelet.server``) takes
its TLS context from ``CertStore``, and the service (``gateway.kubelet.service``) wires the rest.
"""

from gateway.kubelet.auth.access import (
    Authenticator,
    AuthError,
    Authorizer,
    ReviewClient,
    UserInfo,
)
from gateway.kubelet.auth.certs import CertStore
from gateway.kubelet.auth.csr import ServingCertManager, cert_facts

__all__ = [
    "AuthError",
    "Authenticator",
    "Authorizer",
    "CertStore",
    "ReviewClient",
    "ServingCertManager",
    "UserInfo",
    "cert_facts",
]
