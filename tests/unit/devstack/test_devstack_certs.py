"""The devstack PKI produces certificates a TLS stack accepts, with the identities Kubernetes reads."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devstack.certs import Pki, write_kubeconfig


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _subject(cert: x509.Certificate) -> tuple[str, list[str]]:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return str(cn), [str(o) for o in orgs]


def test_admin_is_system_masters_signed_by_client_ca(pki: Pki) -> None:
    admin = _cert(pki.admin.cert)
    admin.verify_directly_issued_by(_cert(pki.client_ca))
    assert _subject(admin) == ("admin", ["system:masters"])
    eku = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku


def test_node_identity(pki: Pki) -> None:
    node = _cert(pki.node_cert("vk-1").cert)
    node.verify_directly_issued_by(_cert(pki.client_ca))
    assert _subject(node) == ("system:node:vk-1", ["system:nodes"])


def test_serving_cert_names_loopback(pki: Pki) -> None:
    serving = _cert(pki.apiserver.cert)
    serving.verify_directly_issued_by(_cert(pki.serving_ca))
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_kubelet_certs_use_their_own_cas(pki: Pki) -> None:
    client = _cert(pki.apiserver_kubelet_client.cert)
    client.verify_directly_issued_by(_cert(pki.kubelet_client_ca))
    assert _subject(client)[0] == "kube-apiserver-kubelet-client"
    serving = _cert(pki.kubelet_serving_cert("vk-1", ips=("127.0.0.5",)).cert)
    serving.verify_directly_issued_by(_cert(pki.kubelet_serving_ca.cert))
    with pytest.raises(ValueError):  # not trusted through the API server's client CA
        serving.verify_directly_issued_by(_cert(pki.client_ca))


def test_private_keys_are_owner_only(pki: Pki) -> None:
    for key in (pki.admin.key, pki.apiserver.key, pki.sa_key, pki.kubelet_serving_ca.key):
        assert key.stat().st_mode & 0o077 == 0, key


async def test_mutual_tls_handshake_with_admin_and_serving_cert(pki: Pki) -> None:
    """The files work in a real TLS handshake (what the API server and kubectl do)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki.apiserver.cert, pki.apiserver.key)
    server_ctx.load_verify_locations(pki.client_ca)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    peers: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert = writer.get_extra_info("peercert")
        peers.append(dict(x[0] for x in cert["subject"])["commonName"])
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=str(pki.serving_ca))
    client_ctx.load_cert_chain(pki.admin.cert, pki.admin.key)
    async with server:
        for host in ("127.0.0.1", "localhost"):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname=host
            )
            assert await reader.read() == b"ok"
            writer.close()
            await writer.wait_closed()
    assert peers == ["admin", "admin"]


def test_kubeconfig_embeds_credentials(pki: Pki, tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kc",
        server="https://127.0.0.1:6443",
        ca_file=pki.serving_ca,
        client=pki.admin,
        user="admin",
    )
    doc = yaml.safe_load(path.read_text())
    cluster = doc["clusters"][0]["cluster"]
    user = doc["users"][0]["user"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == pki.serving_ca.read_bytes()
    assert base64.b64decode(user["client-certificate-data"]) == pki.admin.cert.read_bytes()
    assert base64.b64decode(user["client-key-data"]) == pki.admin.key.read_bytes()
    assert doc["current-context"] == doc["contexts"][0]["name"]
    assert path.stat().st_mode & 0o077 == 0
