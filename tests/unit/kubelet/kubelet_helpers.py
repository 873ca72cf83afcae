"""Test doubles for the kubelet server: a hand-written SPDY client built on our codec, a
scripted exec session, a fake translator, a dict-backed PodLookup, a fake review client and
a throwaway CA."""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.kubelet.streams import spdy
from translators.base import (
    BackendNotFound,
    LogOptions,
    NodeUsage,
    PodRef,
    WorkloadState,
)

# --------------------------------------------------------------------------- SPDY client


class SpdyTestClient:
    """The client half of a SPDY connection, frame by frame (what spdystream does)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.compressor = spdy.HeaderCompressor()
        self.decoder = spdy.FrameDecoder()
        self.next_id = 1
        self.data: dict[int, bytearray] = {}
        self.fin: set[int] = set()
        self.replies: set[int] = set()
        self.resets: dict[int, int] = {}
        self.pings: list[int] = []
        self.goaway: spdy.GoAway | None = None
        self.window_updates: list[spdy.WindowUpdate] = []
        self.frames: list[spdy.Frame] = []
        self.eof = False

    async def send(self, frame: spdy.Frame) -> None:
        self.writer.write(spdy.encode_frame(frame, self.compressor))
        await self.writer.drain()

    async def open(self, stream_type: str, *, fin: bool = False, **headers: str) -> int:
        sid = self.next_id
        self.next_id += 2
        hs = {"streamtype": [stream_type], **{k.lower(): [v] for k, v in headers.items()}}
        self.data[sid] = bytearray()
        await self.send(spdy.SynStream(sid, hs, fin=fin))
        return sid

    async def write(self, sid: int, data: bytes, *, fin: bool = False) -> None:
        await self.send(spdy.DataFrame(sid, data, fin=fin))

    async def read_some(self, wait_s: float = 5.0) -> bool:
        """Read and record frames; False at EOF."""
        chunk = await asyncio.wait_for(self.reader.read(65536), wait_s)
        if not chunk:
            self.eof = True
            return False
        for f in self.decoder.feed(chunk):
            self.frames.append(f)
            match f:
                case spdy.SynReply(stream_id=sid):
                    self.replies.add(sid)
                case spdy.DataFrame(stream_id=sid, data=d, fin=fin):
                    self.data.setdefault(sid, bytearray()).extend(d)
                    if fin:
                        self.fin.add(sid)
                case spdy.RstStream(stream_id=sid, status=st):
                    self.resets[sid] = st
                case spdy.Ping(id=pid):
                    self.pings.append(pid)
                case spdy.GoAway():
                    self.goaway = f
                case spdy.WindowUpdate():
                    self.window_updates.append(f)
        return True

    async def until(self, pred: Callable[[], bool], wait_s: float = 5.0) -> None:
        async with asyncio.timeout(wait_s):
            while not pred():
                if not await self.read_some(wait_s):
                    if not pred():
                        raise AssertionError("connection closed before condition held")
                    return


async def socket_pair() -> tuple[
    tuple[asyncio.StreamReader, asyncio.StreamWriter],
    tuple[asyncio.StreamReader, asyncio.StreamWriter],
]:
    import socket

    a, b = socket.socketpair()
    return await asyncio.open_connection(sock=a), await asyncio.open_connection(sock=b)


# --------------------------------------------------------------------------- exec


class ScriptedExec:
    """An ``ExecSession`` whose behaviour is an async script over its own stdin/output."""

    def __init__(self, script: Callable[[ScriptedExec], Awaitable[int]]) -> None:
        self.stdin: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.out: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self.resizes: list[tuple[int, int]] = []
        self.cancelled = False
        self.stdin_closed = False
        self._code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(script))

    async def _run(self, script: Callable[[ScriptedExec], Awaitable[int]]) -> None:
        try:
            code = await script(self)
        finally:
            await self.out.put(None)
        self._code.set_result(code)

    async def read_stdin(self) -> bytes:
        data = await self.stdin.get()
        return data or b""

    async def emit(self, stream: int, data: bytes) -> None:
        await self.out.put((stream, data))

    async def write_stdin(self, data: bytes) -> None:
        await self.stdin.put(data)

    async def close_stdin(self) -> None:
        self.stdin_closed = True
        await self.stdin.put(None)

    async def resize(self, width: int, height: int) -> None:
        self.resizes.append((width, height))

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        while (item := await self.out.get()) is not None:
            yield item

    async def wait(self) -> int:
        return await self._code

    async def cancel(self) -> None:
        self.cancelled = True
        self._task.cancel()


def echo_then_exit(
    code: int, text: bytes = b"hi\n", err: bytes = b""
) -> Callable[[ScriptedExec], Awaitable[int]]:
    async def script(s: ScriptedExec) -> int:
        await s.emit(1, text)
        if err:
            await s.emit(2, err)
        return code

    return script


async def cat(s: ScriptedExec) -> int:
    """stdin → stdout until EOF, exit 0."""
    while data := await s.read_stdin():
        await s.emit(1, data)
    return 0


# --------------------------------------------------------------------------- translator


@dataclass
class FakeTranslator:
    """Logs from a queue per container (``None`` ends the stream), exec from a script."""

    kind: str = "fake"
    script: Callable[[ScriptedExec], Awaitable[int]] | None = None
    log_lines: dict[str, list[bytes]] = field(default_factory=dict)
    follow_queues: dict[str, asyncio.Queue[bytes | None]] = field(default_factory=dict)
    usage_value: NodeUsage | None = None
    log_calls: list[LogOptions] = field(default_factory=list)
    sessions: list[ScriptedExec] = field(default_factory=list)
    logs_closed: int = 0
    exec_calls: list[tuple[PodRef, str, tuple[str, ...], bool, bool]] = field(default_factory=list)

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        self.log_calls.append(options)
        if container not in self.log_lines:
            raise BackendNotFound(f"no logs for {container}")
        try:
            lines = self.log_lines[container]
            if options.tail_lines is not None:
                lines = lines[-options.tail_lines :] if options.tail_lines else []
            for line in lines:
                yield line
            if options.follow:
                q = self.follow_queues.setdefault(container, asyncio.Queue())
                while (item := await q.get()) is not None:
                    yield item
        finally:
            self.logs_closed += 1

    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> ScriptedExec:
        self.exec_calls.append((ref, container, tuple(command), tty, stdin))
        assert self.script is not None
        s = ScriptedExec(self.script)
        self.sessions.append(s)
        return s

    async def usage(self) -> NodeUsage:
        assert self.usage_value is not None
        return self.usage_value


@dataclass
class LogsOnlyTranslator:
    kind: str = "logsonly"

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        yield b"only logs\n"


class DictPods:
    """``PodLookup`` over a dict keyed ``ns/name``; ``states`` are the workloads' (by uid)."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
        self.finished_uids: set[str] = set()
        self.states: dict[str, WorkloadState] = {}

    def finished(self, uid: str) -> bool:
        return uid in self.finished_uids

    def workload(self, uid: str) -> WorkloadState | None:
        return self.states.get(uid)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.by_key.get(f"{namespace}/{name}")

    def pods(self) -> list[dict[str, Any]]:
        return list(self.by_key.values())


def pod(
    name: str = "p",
    ns: str = "default",
    *,
    node: str = "vk-1",
    containers: Sequence[str] = ("app",),
    uid: str = "uid-1",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {
            "nodeName": node,
            "containers": [{"name": c, "image": "busybox"} for c in containers],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": c,
                    "image": "busybox",
                    "state": {"running": {"startedAt": "2026-03-01T10:00:00Z"}},
                }
                for c in containers
            ],
        },
    }


class FakeReviews:
    """``ReviewClient``: TokenReview by a token→user table, SAR by a predicate."""

    def __init__(
        self,
        *,
        tokens: dict[str, dict[str, Any]] | None = None,
        allow: Callable[[dict[str, Any]], bool] | None = None,
        fail: bool = False,
    ) -> None:
        self.tokens = tokens or {}
        self.allow = allow or (lambda spec: True)
        self.fail = fail
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((path, json.loads(json.dumps(body))))
        if self.fail:
            raise ConnectionError("api down")
        if path.endswith("/tokenreviews"):
            user = self.tokens.get(body["spec"]["token"])
            if user is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": user}}
        spec = body["spec"]
        ok = self.allow(spec)
        return {"status": {"allowed": ok, "reason": "" if ok else "no RBAC rule"}}

    def count(self, suffix: str) -> int:
        return sum(1 for p, _ in self.calls if p.endswith(suffix))


# --------------------------------------------------------------------------- certificates


@dataclass
class TestCA:
    __test__ = False
    cert_pem: bytes
    key: Any

    def issue(
        self, cn: str, orgs: Sequence[str] = (), *, server_hosts: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        ca = x509.load_pem_x509_certificate(self.cert_pem)
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)] + [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs
        ]
        now = _dt.datetime.now(_dt.UTC)
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + _dt.timedelta(days=1))
        )
        if server_hosts:
            sans: list[x509.GeneralName] = []
            for h in server_hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    sans.append(x509.DNSName(h))
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            b = b.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        else:
            b = b.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = b.sign(self.key, hashes.SHA256())
        return (
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )

    def write(
        self, directory: Path, name: str, cn: str, orgs: Sequence[str] = (), **kw: Any
    ) -> tuple[Path, Path]:
        cert, key = self.issue(cn, orgs, **kw)
        c, k = directory / f"{name}.crt", directory / f"{name}.key"
        c.write_bytes(cert)
        k.write_bytes(key)
        return c, k


def make_ca(cn: str = "test-ca") -> TestCA:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = _dt.datetime.now(_dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    from cryptography.hazmat.primitives import serialization

    return TestCA(cert.public_bytes(serialization.Encoding.PEM), key)
