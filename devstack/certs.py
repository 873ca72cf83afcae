"""The local control plane's PKI: every CA, certificate and kubeconfig it needs, made in Python.

Why our own PKI instead of ``openssl`` or kubeadm: the test tier must not depend on tools beyond
Go and Python, and each test session wants fresh, throw-away material.  ECDSA P-256 keys are
generated in milliseconds, so a whole PKI costs well under a second.

Five trust roots, each with one job (mirrors a kubeadm cluster)::

    serving CA        ── kube-apiserver serving cert (SANs localhost, 127.0.0.1)   → kubeconfigs
    client CA         ── admin (CN=admin, O=system:masters), nodes (system:node:<n>) → --client-ca-file
    kubelet-client CA ── the API server's kubelet client cert                       → vkgate's client_ca_file
    kubelet-serving CA── vkgate's kubelet serving certs (issued on demand)          → --kubelet-certificate-authority
    service-account signer (key pair, no CA)                                         → --service-account-*

Files are PEM; keys are unencrypted PKCS#8 with mode 0600.  Kubeconfigs embed the data
(``*-data`` fields) so they stay valid however the reader resolves relative paths.
"""

from __future__ import annotations

import base64
import datetime as _dt
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = _dt.timedelta(days=2)
ADMIN_USER = "admin"
APISERVER_KUBELET_CLIENT_CN = "kube-apiserver-kubelet-client"
FRONT_PROXY_CLIENT_CN = "front-proxy-client"


class CertKey(NamedTuple):
    """Paths of a PEM certificate and its private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class _Issuer:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    files: CertKey


def _name(cn: str, orgs: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _save(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> CertKey:
    return CertKey(
        cert=_write(directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
        key=_write(directory / f"{stem}.key", _key_pem(key), private=True),
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """digitalSignature for every certificate; certSign + cRLSign for CAs only."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(directory: Path, stem: str, cn: str) -> _Issuer:
    """A self-signed CA, written as ``<stem>.crt``/``<stem>.key`` (``files``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Issuer(cert, key, _save(directory, stem, cert, key))


def issue(
    ca: _Issuer,
    directory: Path,
    stem: str,
    *,
    cn: str,
    orgs: Iterable[str] = (),
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    server: bool = False,
    client: bool = False,
) -> CertKey:
    """Issue a leaf certificate signed by ``ca`` and write ``<stem>.crt``/``<stem>.key``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    return _save(directory, stem, cert, key)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_file: Path,
    client: CertKey,
    user: str,
    cluster: str = "vkgate-dev",
) -> Path:
    """A single-context kubeconfig with the CA and client credentials embedded."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_file)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
        "preferences": {},
    }
    _write(path, yaml.safe_dump(doc, sort_keys=False).encode(), private=True)
    return path


class Pki:
    """All certificates of one local control plane, under one directory.

    ``Pki(dir)`` creates the CAs, the API server's serving and kubelet-client certificates, the
    admin client certificate and the service-account signer.  Node client certificates and
    kubelet serving certificates are issued on demand.
    """

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._serving_ca = new_ca(directory, "serving-ca", "vkgate-dev-serving-ca")
        self._client_ca = new_ca(directory, "client-ca", "vkgate-dev-client-ca")
        self._kubelet_client_ca = new_ca(
            directory, "kubelet-client-ca", "vkgate-dev-kubelet-client-ca"
        )
        self._kubelet_serving_ca = new_ca(
            directory, "kubelet-serving-ca", "vkgate-dev-kubelet-serving-ca"
        )
        self.apiserver = issue(
            self._serving_ca,
            directory,
            "apiserver",
            cn="kube-apiserver",
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ips=("127.0.0.1",),
            server=True,
        )
        self.apiserver_kubelet_client = issue(
            self._kubelet_client_ca,
            directory,
            "apiserver-kubelet-client",
            cn=APISERVER_KUBELET_CLIENT_CN,
            orgs=("system:masters",),
            client=True,
        )
        self.admin = self.client_cert(ADMIN_USER, ("system:masters",), stem="admin")
        # The aggregation layer's front proxy (kube-apiserver --requestheader-*/--proxy-client-*):
        # its own CA, separate from the client CA, as kubeadm does.
        self._front_proxy_ca = new_ca(directory, "front-proxy-ca", "vkgate-dev-front-proxy-ca")
        self.front_proxy_client = issue(
            self._front_proxy_ca,
            directory,
            "front-proxy-client",
            cn=FRONT_PROXY_CLIENT_CN,
            client=True,
        )
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.sa_key = _write(directory / "sa.key", _key_pem(sa_key), private=True)
        self.sa_pub = _write(
            directory / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    @property
    def serving_ca(self) -> Path:
        """CA of the API server's serving certificate (goes into kubeconfigs)."""
        return self._serving_ca.files.cert

    @property
    def client_ca(self) -> Path:
        """CA the API server trusts for client certificates (``--client-ca-file``)."""
        return self._client_ca.files.cert

    @property
    def client_ca_pair(self) -> CertKey:
        """The client CA with its key: kube-controller-manager signs client CSRs with it."""
        return self._client_ca.files

    @property
    def front_proxy_ca(self) -> Path:
        """CA of the front-proxy client certificate (``--requestheader-client-ca-file``)."""
        return self._front_proxy_ca.files.cert

    @property
    def kubelet_client_ca(self) -> Path:
        """CA that signed the API server's kubelet client certificate."""
        return self._kubelet_client_ca.files.cert

    @property
    def kubelet_serving_ca(self) -> CertKey:
        """CA (cert and key) for vkgate serving certificates, trusted by the API server."""
        return self._kubelet_serving_ca.files

    def client_cert(self, cn: str, orgs: Iterable[str] = (), *, stem: str = "") -> CertKey:
        """A client certificate the API server accepts as user ``cn`` in groups ``orgs``."""
        return issue(
            self._client_ca,
            self.dir,
            stem or "client-" + cn.replace(":", "_"),
            cn=cn,
            orgs=orgs,
            client=True,
        )

    def kubelet_client_cert(self, cn: str, orgs: Iterable[str] = ()) -> CertKey:
        """A client certificate for calling kubelets (vkgate trusts the kubelet-client CA)."""
        return issue(
            self._kubelet_client_ca,
            self.dir,
            "kubelet-client-" + cn.replace(":", "_"),
            cn=cn,
            orgs=orgs,
            client=True,
        )

    def serving_cert(self, stem: str, *, dns: Iterable[str], ips: Iterable[str] = ()) -> CertKey:
        """A serving certificate signed by the API server's serving CA (aggregated APIs)."""
        return issue(self._serving_ca, self.dir, stem, cn=stem, dns=dns, ips=ips, server=True)

    def node_cert(self, node_name: str) -> CertKey:
        """The ``system:node:<name>`` identity (group ``system:nodes``)."""
        return self.client_cert(f"system:node:{node_name}", ("system:nodes",))

    def kubelet_serving_cert(
        self, name: str, *, ips: Iterable[str] = ("127.0.0.1",), dns: Iterable[str] = ("localhost",)
    ) -> CertKey:
        """A serving certificate for a vkgate kubelet endpoint, signed by the kubelet-serving CA."""
        return issue(
            self._kubelet_serving_ca,
            self.dir,
            "kubelet-serving-" + name,
            cn=name,
            dns=dns,
            ips=ips,
            server=True,
        )
