"""The serving certificate from a kubelet-serving CSR (gateway.kubelet.auth.csr): the request the
signer accepts, self-approval, manual approval, denial, renewal on expiry and on address
change, hot reload into the CertStore.  A fake certificates API signs with a test CA."""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.kube.client import KubeClient, KubeConfig, RetryPolicy
from gateway.kubelet.auth.certs import CertStore
from gateway.kubelet.auth.csr import CSRS, CsrError, ServingCertManager, cert_facts
from vkgate_core.clock import FakeClock

START = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)


class FakeCertificates:
    """CSRs in memory; signs approved ones (unless ``hold``) for ``lifetime``."""

    def __init__(self, clock: FakeClock, lifetime: _dt.timedelta = _dt.timedelta(days=10)) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec

        self.clock = clock
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.lifetime = lifetime
        self.csrs: dict[str, dict[str, Any]] = {}
        self.approvals: list[str] = []
        self.deny = False

    def _sign(self, csr: dict[str, Any]) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import NameOID

        req = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kubelet-serving-ca")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(req.subject)
            .issuer_name(issuer)
            .public_key(req.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.clock.now())
            .not_valid_after(self.clock.now() + self.lifetime)
            .add_extension(san, critical=False)
            .sign(self.key, hashes.SHA256())
        )
        pem = cert.public_bytes(serialization.Encoding.PEM)
        csr.setdefault("status", {})["certificate"] = base64.b64encode(pem).decode()

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        if request.method == "POST" and path == CSRS:
            name = body["metadata"]["name"]
            if name in self.csrs:
                return httpx.Response(409, json={"kind": "Status", "reason": "AlreadyExists"})
            self.csrs[name] = body
            return httpx.Response(201, json=body)
        name = path.removeprefix(CSRS + "/").removesuffix("/approval")
        csr = self.csrs.get(name)
        if csr is None:
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound"})
        if request.method == "PUT" and path.endswith("/approval"):
            self.approvals.append(name)
            csr["status"] = body["status"]
        if self.deny:
            csr.setdefault("status", {})["conditions"] = [
                {"type": "Denied", "status": "True", "reason": "NotOurs", "message": "no"}
            ]
        conds = (csr.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Approved" for c in conds) and "certificate" not in csr["status"]:
            self._sign(csr)
        return httpx.Response(200, json=csr)

    def approve(self, name: str) -> None:
        self.csrs[name].setdefault("status", {})["conditions"] = [
            {"type": "Approved", "status": "True", "reason": "Operator"}
        ]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


def manager(
    api: FakeCertificates,
    clock: FakeClock,
    tmp_path: Path,
    addresses: list[str],
    *,
    self_approve: bool = True,
    store: CertStore | None = None,
) -> ServingCertManager:
    client = KubeClient(
        KubeConfig(server="https://kube.test"),
        transport=httpx.MockTransport(api.handler),
        clock=clock,
        qps=0,
        retry=RetryPolicy(delays=()),
    )
    return ServingCertManager(
        client,
        "vk-1",
        addresses=lambda: addresses,
        cert_file=store.cert_file if store else str(tmp_path / "kubelet.crt"),
        key_file=store.key_file if store else str(tmp_path / "kubelet.key"),
        self_approve=self_approve,
        clock=clock,
        on_written=store.reload_if_changed if store else None,
    )


async def test_self_approved_csr_is_what_the_signer_accepts_and_is_hot_reloaded(
    clock: FakeClock, tmp_path: Path
) -> None:
    from cryptography import x509

    api = FakeCertificates(clock)
    store = CertStore(hosts=["127.0.0.1"], check_interval=0, clock=clock)
    try:
        m = manager(api, clock, tmp_path, ["10.0.0.7"], store=store)
        await m.obtain()
        ((name, csr),) = api.csrs.items()
        spec = csr["spec"]
        assert spec["signerName"] == "kubernetes.io/kubelet-serving"
        assert spec["usages"] == ["digital signature", "server auth"]
        req = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
        assert req.subject.rfc4514_string() == "CN=system:node:vk-1,O=system:nodes"
        assert api.approvals == [name] and m.csr_name == name
        _, _, ips, dns, issuer = cert_facts(Path(store.cert_file).read_bytes())
        assert (ips, dns) == (["10.0.0.7"], ["vk-1"]) and "fake-kubelet-serving-ca" in issuer
        assert store.reloads == 1 and m.renewal_reason() == ""
    finally:
        store.close()


async def test_without_self_approval_it_waits_and_names_the_approve_command(
    clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeCertificates(clock)
    m = manager(api, clock, tmp_path, ["10.0.0.7"], self_approve=False)
    task = asyncio.create_task(m.obtain())
    for _ in range(5):
        await clock.advance(1)
    assert not task.done() and api.approvals == []
    assert f"kubectl certificate approve {m.csr_name}" in caplog.text
    api.approve(m.csr_name)
    await clock.advance(1)
    await asyncio.wait_for(task, 1)
    assert m.from_signer and Path(tmp_path / "kubelet.crt").exists()
    assert oct(Path(tmp_path / "kubelet.key").stat().st_mode & 0o777) == "0o600"


async def test_a_denied_csr_is_an_error_and_nothing_is_written(
    clock: FakeClock, tmp_path: Path
) -> None:
    api = FakeCertificates(clock)
    api.deny = True
    m = manager(api, clock, tmp_path, ["10.0.0.7"], self_approve=False)
    with pytest.raises(CsrError, match="denied: NotOurs"):
        await m.obtain()
    assert not (tmp_path / "kubelet.crt").exists()


async def test_renewed_at_70_percent_of_its_lifetime_and_when_addresses_change(
    clock: FakeClock, tmp_path: Path
) -> None:
    api = FakeCertificates(clock, lifetime=_dt.timedelta(days=10))
    addresses = ["10.0.0.7"]
    m = manager(api, clock, tmp_path, addresses)
    m.check_interval = 3600
    m.start()
    try:
        for _ in range(3):
            await clock.advance(0)
        assert m.issued == 1
        await clock.advance(6.9 * 86400)  # 69 %: nothing
        assert m.issued == 1
        await clock.advance(0.2 * 86400)  # past 70 %
        for _ in range(3):
            await clock.advance(0)
        assert m.issued == 2
        addresses[0] = "10.0.0.8"  # the pod IP changed
        assert "addresses changed" in m.renewal_reason()
        m.wake()
        for _ in range(5):
            await clock.advance(0)
        assert m.issued == 3
        _, _, ips, _, _ = cert_facts((tmp_path / "kubelet.crt").read_bytes())
        assert ips == ["10.0.0.8"]
    finally:
        await m.stop()
