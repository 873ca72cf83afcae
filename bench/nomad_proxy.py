"""A counting HTTP/1.1 proxy in front of Nomad: requests by endpoint, connections held.

Run: ``python -m bench.nomad_proxy --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT
--control 127.0.0.1:PORT`` (``bench.nomad_burst`` starts it as a child process, so its work
does not share the harness's event loop).

Why a proxy and not the agent's own metrics: it counts what *any* client sends — vkgate and
the Nomad floor alike — with no cooperation from either.  It parses only the client → Nomad
direction (request line, headers, a ``Content-Length`` or chunked body) and copies the answers
back byte for byte, so blocking queries and the event stream pass through unchanged.  HTTP/1.1
clients do not pipeline: each request on a connection follows the previous answer, so one
upstream connection per client connection keeps them in order.

TLS (``--tls-ca``, ``--tls-cert``, ``--tls-key``; the e2e cluster's mutual TLS): the proxy
serves the given certificate and, as Nomad's ``verify_https_client`` does, asks every client
for one the CA signed; upstream it connects with TLS too, presenting ``--upstream-cert`` and
verifying the server by ``--upstream-name``.  It has to end TLS to count requests at all.

The control address answers ``GET /counts`` with JSON ``{"requests": {endpoint: n},
"connections": now, "connections_max": max since the last reset,
"connections_opened": since the last reset}`` and ``POST /reset`` (zero
the counts, max := now).  Endpoints are ``METHOD /v1/path`` with IDs replaced by ``:id``
(``endpoint``), plus ``?index`` for a blocking query and ``?purge`` for a purging deregister.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import ssl
from collections import Counter
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

#: Path segments whose next segment is an object ID (``/v1/job/<id>/allocations``).
_ID_AFTER = frozenset(
    {"job", "allocation", "alloc", "evaluation", "node", "deployment", "namespace", "volume"}
)


def endpoint(method: str, target: str) -> str:
    """``GET /v1/job/:id/allocations``: the request's method and path with IDs elided.

    A query with a non-zero ``index`` is a blocking query (``?index``); ``purge=true`` marks
    a purging deregister (``?purge``).  Other query parameters are dropped."""
    parts = urlsplit(target)
    segments = parts.path.split("/")
    out: list[str] = []
    hide = False
    for seg in segments:
        out.append(":id" if hide and seg else seg)
        hide = seg in _ID_AFTER and not hide
    # /v1/client/fs/<op>/<alloc id>
    if len(out) > 4 and out[1:3] == ["v1", "client"] and out[3] == "fs" and len(out) > 5:
        out[5] = ":id"
    # /v1/var/<path of the variable> (vkgate deletes nomad/jobs/<job id> with each job)
    if len(out) > 3 and out[1:3] == ["v1", "var"]:
        out[3:] = [":path"]
    path = "/".join(out)
    query = parse_qs(parts.query)
    marks = []
    if query.get("index", ["0"])[0] not in ("", "0"):
        marks.append("index")
    if query.get("purge", ["false"])[0].lower() == "true":
        marks.append("purge")
    return f"{method.upper()} {path}" + (f"?{'&'.join(marks)}" if marks else "")


class Stats:
    """What the proxy has seen since the last ``reset``."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.connections = 0
        self.connections_max = 0
        #: connections opened since the last reset (churn: a pooled client opens few)
        self.connections_opened = 0

    def opened(self) -> None:
        self.connections += 1
        self.connections_opened += 1
        self.connections_max = max(self.connections_max, self.connections)

    def closed(self) -> None:
        self.connections -= 1

    def reset(self) -> None:
        self.requests.clear()
        self.connections_max = self.connections
        self.connections_opened = 0

    def snapshot(self) -> dict[str, object]:
        return {
            "requests": dict(self.requests),
            "connections": self.connections,
            "connections_max": self.connections_max,
            "connections_opened": self.connections_opened,
        }


async def _copy_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str]
) -> None:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            writer.write(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers up to the empty line
                    line = await reader.readline()
                    writer.write(line)
                    if line in (b"\r\n", b"\n", b""):
                        return
            writer.write(await reader.readexactly(size + 2))
    length = int(headers.get("content-length", "0") or 0)
    if length:
        writer.write(await reader.readexactly(length))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class Proxy:
    def __init__(
        self,
        upstream: tuple[str, int],
        upstream_tls: ssl.SSLContext | None = None,
        upstream_name: str = "",
    ) -> None:
        self.upstream = upstream
        self.upstream_tls = upstream_tls
        self.upstream_name = upstream_name
        self.stats = Stats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.opened()
        up_w: asyncio.StreamWriter | None = None
        back: asyncio.Task[None] | None = None
        try:
            up_r, up_w = await asyncio.open_connection(
                *self.upstream,
                ssl=self.upstream_tls,
                server_hostname=(self.upstream_name or None) if self.upstream_tls else None,
            )
            back = asyncio.create_task(_pipe(up_r, writer))
            while True:
                line = await reader.readline()
                if not line:
                    break
                raw = [line]
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    raw.append(h)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = h.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                method, target, *_ = line.decode("latin-1").split(" ")
                self.stats.requests[endpoint(method, target)] += 1
                up_w.write(b"".join(raw))
                await _copy_body(reader, up_w, headers)
                await up_w.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self.stats.closed()  # the client's side is closed: it no longer holds it
            if up_w is not None:
                with contextlib.suppress(Exception):
                    up_w.close()
            if back is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(back, 5)
            with contextlib.suppress(Exception):
                writer.close()

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            method, target, *_ = line.decode("latin-1").split(" ")
            if method == "POST" and target == "/reset":
                self.stats.reset()
            body = json.dumps(self.stats.snapshot()).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def tls_contexts(
    ca: str, cert: str, key: str, upstream_cert: str, upstream_key: str
) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the listening side's context, the upstream side's): both verify against ``ca``; the
    listening side requires a client certificate."""
    listen = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
    listen.load_cert_chain(cert, key)
    listen.verify_mode = ssl.CERT_REQUIRED
    up = ssl.create_default_context(cafile=ca)
    up.load_cert_chain(upstream_cert, upstream_key)
    return listen, up


async def serve(
    listen: str,
    upstream: str,
    control: str,
    *,
    listen_tls: ssl.SSLContext | None = None,
    upstream_tls: ssl.SSLContext | None = None,
    upstream_name: str = "",
) -> None:
    proxy = Proxy(_hostport(upstream), upstream_tls, upstream_name)
    server = await asyncio.start_server(
        proxy.handle, *_hostport(listen), backlog=1024, ssl=listen_tls
    )
    ctl = await asyncio.start_server(proxy.control, *_hostport(control))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server, ctl:
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.nomad_proxy", description=__doc__.split("\n")[0]
    )
    p.add_argument("--listen", required=True, help="127.0.0.1:PORT clients connect to")
    p.add_argument("--upstream", required=True, help="Nomad's HTTP address, host:port")
    p.add_argument("--control", required=True, help="127.0.0.1:PORT for /counts and /reset")
    p.add_argument("--tls-ca", default="", help="CA file: TLS on both sides (mutual)")
    p.add_argument("--tls-cert", default="", help="the certificate the proxy serves")
    p.add_argument("--tls-key", default="", help="its key")
    p.add_argument("--upstream-cert", default="", help="client certificate towards Nomad")
    p.add_argument("--upstream-key", default="", help="its key")
    p.add_argument("--upstream-name", default="", help="the server name Nomad's cert carries")
    args = p.parse_args(argv)
    tls = (args.tls_cert, args.tls_key, args.upstream_cert, args.upstream_key)
    if args.tls_ca and not all(tls):
        p.error("--tls-ca needs --tls-cert, --tls-key, --upstream-cert and --upstream-key")
    listen_tls, upstream_tls = tls_contexts(args.tls_ca, *tls) if args.tls_ca else (None, None)
    asyncio.run(
        serve(
            args.listen,
            args.upstream,
            args.control,
            listen_tls=listen_tls,
            upstream_tls=upstream_tls,
            upstream_name=args.upstream_name,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
