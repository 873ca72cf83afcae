"""TLS for the kubelet server: the serving certificate (from files, reloaded when they change,
or self-signed at start for dev) and the client CA that authenticates the API server.

Every accepted TCP connection asks ``CertStore.context()`` for the SSL context and upgrades
with it, so a rotated certificate (cert-manager, kubelet-serving CSR renewal) takes effect for
the next connection without a restart and without touching live ones.  Files are checked at
most every ``check_interval`` seconds (mtime + size); a half-written pair that fails to load
keeps the previous context and logs why.

Client certificates are *requested, not required* (``CERT_OPTIONAL``): token clients such as
metrics-server present none and must still get through to TokenReview.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gateway.errors import StartupError
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger(__name__)


def self_signed(hosts: Sequence[str], *, days: int = 365) -> tuple[bytes, bytes]:
    """A self-signed serving certificate (PEM cert, PEM key) for ``hosts`` (IPs or DNS names)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names = list(dict.fromkeys(h for h in hosts if h)) or ["localhost"]
    sans: list[x509.GeneralName] = []
    for h in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"vkgate@{names[0]}")])
    now = _dt.datetime.now(_dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _stamp(*paths: str) -> tuple[tuple[float, int], ...]:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_mtime, st.st_size))
        except OSError:
            out.append((0.0, -1))
    return tuple(out)


class CertStore:
    """Holds the current server ``SSLContext``; rebuilds it when the files change."""

    def __init__(
        self,
        *,
        cert_file: str = "",
        key_file: str = "",
        client_ca_file: str = "",
        hosts: Sequence[str] = (),
        check_interval: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        if bool(cert_file) != bool(key_file):
            raise StartupError("kubelet.cert_file and kubelet.key_file must be set together")
        self._clock = clock or SystemClock()
        self._check_interval = check_interval
        self._client_ca = client_ca_file
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cert_file:
            self.cert_file, self.key_file = cert_file, key_file
            self.self_signed = False
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="vkgate-tls-")
            cert, key = self_signed(list(hosts) or ["127.0.0.1", "localhost"])
            self.cert_file = os.path.join(self._tmp.name, "serving.crt")
            self.key_file = os.path.join(self._tmp.name, "serving.key")
            Path(self.cert_file).write_bytes(cert)
            fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            self.self_signed = True
            log.warning(
                "kubelet: serving a self-signed certificate for %s (dev only)", ", ".join(hosts)
            )
        self._stamp = _stamp(*self._watched())
        try:
            self._context = self._build()
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"kubelet TLS: cannot load certificates: {exc}") from exc
        self._checked = self._clock.monotonic()
        self.reloads = 0

    def _watched(self) -> list[str]:
        return [self.cert_file, self.key_file] + ([self._client_ca] if self._client_ca else [])

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self._client_ca:
            ctx.load_verify_locations(cafile=self._client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        else:
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def context(self) -> ssl.SSLContext:
        """The context for the next connection (reloaded if the files changed)."""
        now = self._clock.monotonic()
        if now - self._checked >= self._check_interval:
            self._checked = now
            self.reload_if_changed()
        return self._context

    def reload_if_changed(self) -> bool:
        stamp = _stamp(*self._watched())
        if stamp == self._stamp:
            return False
        try:
            ctx = self._build()
        except (OSError, ssl.SSLError) as exc:
            log.warning("kubelet TLS: keeping the previous certificate, reload failed: %s", exc)
            return False
        self._stamp, self._context = stamp, ctx
        self.reloads += 1
        log.info("kubelet TLS: reloaded serving certificate from %s", self.cert_file)
        return True

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
