"""The kubelet HTTPS API on :10250 — logs, exec/attach, port-forward, stats and metrics — with
authentication, authorization and the SPDY/WebSocket stream codecs it needs.

``KubeletServer`` (service.py) is the entry point the App starts; it depends on the pod
controller only through ``PodLookup`` and on the API server only through ``ReviewClient``.

Floor plan, top over bottom (.importlinter, ``kubelet-layers``; docs/architecture.md):

* ``service`` — ``KubeletServer``: TLS, authn, authz, routes and own metrics wired together.
* ``api/`` — the HTTP API, as virtual-kubelet's ``node/api``: routes, one handler per
  endpoint (logs, attach, port-forward, stats, resource metrics), the own-metrics server.
* ``streams/`` — the Kubernetes stream protocols: exec/attach sessions over SPDY/3.1 or
  WebSocket.
* ``server`` — HTTP/1.1 over asyncio (h11), TLS per connection, the upgrade hijack.
* ``auth/`` — serving identity and request auth: authn/authz, the certificate store, the
  serving certificate from a CSR.
"""

from gateway.kubelet.api import PodLookup
from gateway.kubelet.auth import ReviewClient
from gateway.kubelet.service import KubeletServer

__all__ = ["KubeletServer", "PodLookup", "ReviewClient"]
