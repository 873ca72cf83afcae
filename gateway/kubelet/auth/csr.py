"""The kubelet serving certificate from a CertificateSigningRequest (docs/design/kubelet-csr.md).

With ``kubelet.csr = true`` the server starts on a self-signed certificate (so it listens at
once) and this manager asks the cluster for a real one, as the kubelet does with
``serverTLSBootstrap``:

1. a fresh ECDSA P-256 key and an x509 request: ``CN=system:node:<node>``, ``O=system:nodes``,
   SANs = the node's current addresses (InternalIP, node name) — exactly what the
   ``kubernetes.io/kubelet-serving`` signer accepts;
2. a ``certificates.k8s.io/v1`` CSR with that signer and usages ``digital signature``,
   ``server auth``;
3. approval: with ``kubelet.csr_self_approve`` the agent approves its own CSR (needs ``update``
   on ``certificatesigningrequests/approval`` and ``approve`` on
   ``signers/kubernetes.io/kubelet-serving``); otherwise an operator runs
   ``kubectl certificate approve <name>`` (the name is logged every minute while it waits);
4. the signed certificate and its key are written over the files the ``CertStore`` serves
   (key first, each replaced atomically); the store reloads them for the next connection.

Renewal: when 70 % of the certificate's lifetime has passed, or when the node's addresses no
longer match the certificate's SANs (checked every ``check_interval`` and at once on
``wake()``).  A denied or failed CSR is logged and retried with backoff; the current
certificate keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import hashlib
import ipaddress
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError, Conflict
from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
RENEW_FRACTION = 0.7
#: Waits after consecutive failed requests: 10 s doubling to 300 s, not jittered.
RETRY_BACKOFF = Backoff(base=10.0, factor=2.0, cap=300.0, jitter=0.0)


def _sans(addresses: Sequence[str]) -> tuple[list[str], list[str]]:
    """(IP addresses, DNS names), each sorted and without duplicates or blanks."""
    ips: set[str] = set()
    dns: set[str] = set()
    for a in addresses:
        if not a or a == "0.0.0.0":
            continue
        try:
            ips.add(str(ipaddress.ip_address(a)))
        except ValueError:
            dns.add(a)
    return sorted(ips), sorted(dns)


def make_request(node_name: str, addresses: Sequence[str]) -> tuple[bytes, bytes]:
    """(PEM certificate request, PEM private key) for the kubelet-serving signer."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    ips, dns = _sans(addresses)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (
        csr.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def cert_facts(pem: bytes) -> tuple[_dt.datetime, _dt.datetime, list[str], list[str], str]:
    """(not before, not after, SAN IPs, SAN DNS names, issuer) of a PEM certificate."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = sorted(str(i) for i in san.get_values_for_type(x509.IPAddress))
        dns = sorted(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        ips, dns = [], []
    return (
        cert.not_valid_before_utc,
        cert.not_valid_after_utc,
        ips,
        dns,
        cert.issuer.rfc4514_string(),
    )


def _write_atomic(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


class CsrError(Exception):
    """The CSR was denied, failed, or could not be created."""


class ServingCertManager:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        *,
        addresses: Callable[[], Sequence[str]],
        cert_file: str,
        key_file: str,
        self_approve: bool = False,
        expiration_seconds: int = 0,
        check_interval: float = 30.0,
        poll_interval: float = 1.0,
        clock: Clock | None = None,
        on_written: Callable[[], object] | None = None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.addresses = addresses
        self.cert_file = cert_file
        self.key_file = key_file
        self.self_approve = self_approve
        self.expiration_seconds = expiration_seconds
        self.check_interval = check_interval
        self.poll_interval = poll_interval
        self.clock: Clock = clock or SystemClock()
        self.on_written = on_written
        #: Name of the last CSR this manager created ("" before the first).
        self.csr_name = ""
        #: Certificates obtained since start.
        self.issued = 0
        #: Set once the served certificate came from the signer (not self-signed).
        self.from_signer = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- decisions ---------------------------------------------------------------------

    def wanted_sans(self) -> tuple[list[str], list[str]]:
        return _sans([*self.addresses(), self.node_name])

    def renewal_reason(self) -> str:
        """Why the current certificate must be replaced ("" when it is fine)."""
        if not self.from_signer:
            return "no certificate from the signer yet"
        try:
            pem = Path(self.cert_file).read_bytes()
            not_before, not_after, ips, dns, _ = cert_facts(pem)
        except (OSError, ValueError) as exc:
            return f"cannot read {self.cert_file}: {exc}"
        if (ips, dns) != self.wanted_sans():
            return f"addresses changed (certificate has {ips + dns})"
        lifetime = (not_after - not_before).total_seconds()
        renew_at = not_before + _dt.timedelta(seconds=lifetime * RENEW_FRACTION)
        if self.clock.now() >= renew_at:
            return f"{RENEW_FRACTION:.0%} of its lifetime passed (expires {not_after.isoformat()})"
        return ""

    # -- one certificate ---------------------------------------------------------------

    async def obtain(self) -> None:
        """Create a CSR, approve it if allowed, wait for the signer, write cert and key."""
        ips, dns = self.wanted_sans()
        request, key = make_request(self.node_name, [*ips, *dns])
        digest = hashlib.sha256(request).hexdigest()[:10]
        name = f"vkgate-{self.node_name}-{digest}"
        spec: dict[str, Any] = {
            "request": base64.b64encode(request).decode(),
            "signerName": SIGNER,
            "usages": ["digital signature", "server auth"],
        }
        if self.expiration_seconds:
            spec["expirationSeconds"] = self.expiration_seconds
        body = {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": name, "labels": {"vkgate.io/node": self.node_name}},
            "spec": spec,
        }
        try:
            await self.client.create(CSRS, body)
        except Conflict:
            pass  # our own request from a previous try (same key material can't recur)
        except ApiError as exc:
            raise CsrError(f"cannot create CSR {name}: {exc}") from exc
        self.csr_name = name
        log.info("kubelet TLS: CSR %s created for %s (signer %s)", name, ips + dns, SIGNER)
        if self.self_approve:
            await self._approve(name)
        cert = await self._wait_signed(name)
        _write_atomic(self.key_file, key, 0o600)
        _write_atomic(self.cert_file, cert, 0o644)
        self.from_signer = True
        self.issued += 1
        _, not_after, _, _, issuer = cert_facts(cert)
        log.info(
            "kubelet TLS: serving certificate from CSR %s (issuer %s, expires %s)",
            name,
            issuer,
            not_after.isoformat(),
        )
        if self.on_written is not None:
            self.on_written()

    async def _approve(self, name: str) -> None:
        csr = await self.client.get(f"{CSRS}/{name}")
        status = dict(csr.get("status") or {})
        if any(c.get("type") == "Approved" for c in status.get("conditions") or []):
            return
        status["conditions"] = [
            *(status.get("conditions") or []),
            {
                "type": "Approved",
                "status": "True",
                "reason": "VkgateSelfApproved",
                "message": f"vkgate approved the serving certificate of node {self.node_name}",
            },
        ]
        csr["status"] = status
        try:
            await self.client.replace(f"{CSRS}/{name}/approval", csr)
        except ApiError as exc:
            raise CsrError(
                f"cannot approve CSR {name} ({exc}); grant update on "
                "certificatesigningrequests/approval and approve on "
                f"signers/{SIGNER}, or run: kubectl certificate approve {name}"
            ) from exc

    async def _wait_signed(self, name: str) -> bytes:
        waited = 0.0
        next_hint = 0.0
        while True:
            csr = await self.client.get(f"{CSRS}/{name}")
            status = csr.get("status") or {}
            for c in status.get("conditions") or []:
                if c.get("type") in ("Denied", "Failed") and c.get("status", "True") == "True":
                    raise CsrError(
                        f"CSR {name} {c['type'].lower()}: {c.get('reason', '')} "
                        f"{c.get('message', '')}".strip()
                    )
            if status.get("certificate"):
                return base64.b64decode(status["certificate"])
            if waited >= next_hint:
                approved = any(c.get("type") == "Approved" for c in status.get("conditions") or [])
                if approved:
                    log.info("kubelet TLS: CSR %s approved, waiting for the signer", name)
                else:
                    log.warning(
                        "kubelet TLS: CSR %s waits for approval: kubectl certificate approve %s",
                        name,
                        name,
                    )
                next_hint = waited + 60.0
            await self.clock.sleep(self.poll_interval)
            waited += self.poll_interval

    # -- loop --------------------------------------------------------------------------

    def wake(self) -> None:
        """Re-check now (the node's addresses may have changed)."""
        self._wake.set()

    async def run(self) -> None:
        failures = 0
        while True:
            reason = self.renewal_reason()
            if reason:
                log.info("kubelet TLS: requesting a serving certificate: %s", reason)
                try:
                    await self.obtain()
                    failures = 0
                except (CsrError, ApiError) as exc:
                    failures += 1
                    delay = RETRY_BACKOFF.delay(failures)
                    log.warning("kubelet TLS: %s; retry in %.0fs", exc, delay)
                    await self._sleep(delay)
                    continue
            await self._sleep(self.check_interval)

    async def _sleep(self, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (sleeper, woken):
                t.cancel()
            self._wake.clear()

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=f"kubelet-csr:{self.node_name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
