"""Exec through ``POST /containers/{id}/execute``: one-shot, or interactive over a WebSocket.

* **One-shot** (``run=true``, no stdin): Zun runs the command and answers
  ``{"output", "exit_code"}``; stdout and stderr arrive merged, so everything is reported on
  stdout.  ``command`` is one string that Docker splits with shell rules, so argv is joined
  with ``shlex.join`` (arguments with spaces survive).
* **Interactive** (stdin or tty requested): ``run=false&interactive=true`` returns a WebSocket
  ``url`` (Zun's wsproxy) and an ``exec_id`` for ``execute_resize``.  Bytes are relayed raw
  both ways.  Upstream documents neither the framing nor an exit code for this path
  (docs/design/zun.md, "Limitations"): ``wait()`` returns 0 after a normal close and 1
  otherwise.  A server that answers without a ``url`` gets a clear ``UnsupportedError``.

Only standalone containers support exec (capsule containers answer 404; the translator
explains that to kubectl).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

from translators.base import BackendConflict, BackendRejected, BackendUnavailable, UnsupportedError
from translators.zun.client import ZunClient


def command_string(argv: Sequence[str]) -> str:
    if not argv:
        raise BackendRejected("exec needs a command", status=400)
    return shlex.join(argv)


class CompletedExec:
    """The result of a one-shot exec, presented as an ``ExecSession``."""

    def __init__(self, output: bytes, exit_code: int) -> None:
        self._output = output
        self._exit_code = exit_code

    async def write_stdin(self, data: bytes) -> None:
        return None

    async def close_stdin(self) -> None:
        return None

    async def resize(self, width: int, height: int) -> None:
        return None

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        if self._output:
            yield 1, self._output

    async def wait(self) -> int:
        return self._exit_code

    async def cancel(self) -> None:
        return None


class WebSocketExec:
    """An interactive exec relayed over Zun's WebSocket URL."""

    def __init__(self, client: ZunClient, ident: str, exec_id: str, ws: Any) -> None:
        self._client = client
        self._ident = ident
        self._exec_id = exec_id
        self._ws = ws
        self._done = asyncio.Event()
        self._code = 0

    @classmethod
    async def open(
        cls, client: ZunClient, ident: str, command: str, *, verify: bool | str = True
    ) -> WebSocketExec:
        from websockets.asyncio.client import connect

        reply = await _execute(client, ident, command, run=False, interactive=True)
        url = str(reply.get("url") or "")
        if not url:
            raise UnsupportedError(
                "this Zun server returned no WebSocket URL for interactive exec; "
                "run the command without -i/-t",
                reason="UnsupportedByBackend",
            )
        ssl_ctx: ssl.SSLContext | None = None
        if url.startswith("wss:"):
            ssl_ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                ssl_ctx.check_hostname = False
                ssl_ctx.verify_mode = ssl.CERT_NONE
        try:
            ws = await connect(url, ssl=ssl_ctx, open_timeout=30, max_size=None)
        except (OSError, TimeoutError) as exc:
            raise BackendUnavailable(f"cannot open Zun exec WebSocket: {exc!r}") from exc
        except Exception as exc:  # websockets.InvalidHandshake and friends
            raise BackendUnavailable(f"Zun exec WebSocket handshake failed: {exc}") from exc
        return cls(client, ident, str(reply.get("exec_id") or ""), ws)

    async def write_stdin(self, data: bytes) -> None:
        if not self._done.is_set():
            await self._ws.send(data)

    async def close_stdin(self) -> None:
        return None  # the wsproxy has no half-close; the process sees EOF when we close

    async def resize(self, width: int, height: int) -> None:
        if self._exec_id:
            with contextlib.suppress(BackendConflict):
                await self._client.execute_resize(self._ident, self._exec_id, width, height)

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        from websockets.exceptions import ConnectionClosed

        try:
            async for message in self._ws:
                yield 1, message.encode() if isinstance(message, str) else bytes(message)
            self._code = 0
        except ConnectionClosed:
            self._code = 1
        finally:
            self._done.set()

    async def wait(self) -> int:
        await self._done.wait()
        return self._code

    async def cancel(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()
        self._done.set()


async def _execute(
    client: ZunClient, ident: str, command: str, *, run: bool, interactive: bool
) -> dict[str, Any]:
    try:
        return await client.execute(ident, command, run=run, interactive=interactive)
    except BackendConflict as exc:
        raise BackendRejected(
            f"container is not running, cannot exec: {exc}", status=400, reason="BadRequest"
        ) from exc


async def run_exec(
    client: ZunClient,
    ident: str,
    argv: Sequence[str],
    *,
    tty: bool,
    stdin: bool,
    interactive_allowed: bool,
    verify: bool | str = True,
) -> CompletedExec | WebSocketExec:
    command = command_string(argv)
    if stdin or tty:
        if not interactive_allowed:
            raise UnsupportedError(
                "interactive exec (-i/-t) is disabled for Zun ([backend.zun] interactive_exec)",
                reason="UnsupportedByBackend",
            )
        return await WebSocketExec.open(client, ident, command, verify=verify)
    reply = await _execute(client, ident, command, run=True, interactive=False)
    output = str(reply.get("output") or "").encode()
    code = reply.get("exit_code")
    return CompletedExec(output, int(code) if code is not None else 0)
