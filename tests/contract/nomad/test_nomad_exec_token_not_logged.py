"""The Nomad ACL token never reaches a log line, even at debug: the exec handshake frame
carries it, and the websockets client logs every frame at debug (docs/design/secrets.md)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import respx
from nomad_fixtures import NODE, captured, mock_node
from websockets.asyncio.server import ServerConnection, serve

from gateway.logging_setup import redact, setup_logging
from translators.base import PodRef, TranslatorContext
from translators.nomad import NomadTranslator

pytestmark = pytest.mark.contract

CANARY = "canary-acl-token-7f3e9b"


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    levels = {n: logging.getLogger(n).level for n in ("httpx", "httpcore", "asyncio", "websockets")}
    buf = io.StringIO()
    setup_logging("debug", "text", stream=buf)
    try:
        yield buf
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


async def test_exec_handshake_token_is_not_logged_at_debug(debug_log: io.StringIO) -> None:
    doc = captured("running")
    job, meta = doc["job"], doc["job"]["Meta"]
    handshakes: list[str] = []

    async def handler(ws: ServerConnection) -> None:
        handshakes.append(str(await ws.recv()))
        await ws.send(json.dumps({"exited": True, "result": {"exit_code": 0}}))
        await ws.close()

    async with serve(handler, "127.0.0.1", 0) as server:
        address = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        t = NomadTranslator(
            TranslatorContext(NODE, {"address": address, "token": CANARY, "mhz_per_core": 1000}),
            environ={},
        )
        try:
            with respx.mock(base_url=address) as nomad:
                nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
                nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
                    return_value=httpx.Response(200, json=doc["allocations"])
                )
                mock_node(nomad, doc["allocations"][0], address.removeprefix("http://"))
                session = await t.exec(
                    PodRef(meta["k8s.namespace"], meta["k8s.name"], meta["k8s.uid"]),
                    "app",
                    ["true"],
                    tty=False,
                    stdin=False,
                )
            _ = [item async for item in session.output()]
            assert await session.wait() == 0
        finally:
            await t.close()
    assert CANARY in handshakes[0]  # the token was really sent in the frame
    # a library that logs the frame anyway (as websockets does at debug) is masked too
    logging.getLogger("tests.canary").debug("> TEXT %r", handshakes[0])
    text = debug_log.getvalue()
    assert "DEBUG" in text  # debug logging was on
    assert CANARY not in text


@pytest.mark.parametrize(
    "line",
    [
        '> TEXT \'{"version": 1, "auth_token": "SECRET"}\' [44 bytes]',
        "> X-Nomad-Token: SECRET",
        "Authorization: Bearer SECRET",
        "password=SECRET; next",
        "{'account_key': 'SECRET'}",
    ],
)
def test_redact_masks_the_value_after_a_credential_key(line: str) -> None:
    out = redact(line)
    assert "SECRET" not in out and "*****" in out
