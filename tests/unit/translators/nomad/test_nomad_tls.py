"""TLS on the client side, against a real TLS server on loopback that, like a Nomad agent with
``verify_https_client``, demands a client certificate and presents one that names only
``server.global.nomad`` and ``localhost`` (no IP SAN).

Every ``NOMAD_*`` TLS variable a ``nomad`` shell has is read; every connection (calls and the
exec WebSocket) sends the configured server name; a wrong CA, a missing client certificate or a
name mismatch is one line naming the address and the TLS error — not retried, no traceback —
and the backend's health says so.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devstack.certs import issue, new_ca
from gateway import cli
from gateway.node.health import BackendHealth
from tests.fake_time import FakeTime
from translators.base import BackendAuthError, BackendUnavailable, TranslatorContext
from translators.nomad import NomadTranslator
from translators.nomad.client import ssl_context
from translators.nomad.config import NomadConfig
from translators.nomad.exec import NomadExecSession
from vkgate_core.settings import SettingsError

SERVER_NAME = "server.global.nomad"

ANSWERS = {
    "/v1/status/leader": (200, '"127.0.0.1:4647"'),
    "/v1/agent/health": (200, "{}"),
    "/v1/jobs": (200, "[]"),
    "/v1/allocations": (200, "[]"),
    "/v1/job/vkgate-acl-probe": (404, "job not found"),
    "/v1/job/vkgate-acl-probe/plan": (200, "{}"),
}


@dataclass
class Pki:
    ca: Path
    other_ca: Path
    client_cert: Path
    client_key: Path
    server_cert: Path
    server_key: Path


@dataclass
class TLSServer:
    """Nomad-like HTTPS on 127.0.0.1: client certificates required; after a failed handshake
    it closes gracefully, so the client reads the TLS alert (as from Go's TLS server)."""

    pki: Pki
    handshakes: int = 0
    server_names: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.pki.server_cert, self.pki.server_key)
        ctx.load_verify_locations(self.pki.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.sni_callback = lambda _sock, name, _ctx: self.server_names.append(name)
        self.ctx = ctx
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        tls = self.ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        self.handshakes += 1
        try:
            tls.settimeout(5)
            tls.do_handshake()
        except (ssl.SSLError, OSError):
            try:
                tls.shutdown(socket.SHUT_WR)
                while tls.recv(65536):
                    pass
            except OSError:
                pass
            tls.close()
            return
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode().split("?", 1)[0]
            self.paths.append(path)
            status, body = ANSWERS.get(path, (403, "Permission denied"))
            tls.sendall(
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nConnection: close\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
            )
        except OSError:
            pass
        finally:
            tls.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = new_ca(d, "ca", "nomad test CA")
    other = new_ca(d, "other-ca", "some other CA")
    server = issue(ca, d, "server", cn=SERVER_NAME, dns=[SERVER_NAME, "localhost"], server=True)
    client = issue(ca, d, "client", cn="vkgate", client=True)
    return Pki(ca.files.cert, other.files.cert, client.cert, client.key, server.cert, server.key)


@pytest.fixture
def server(pki: Pki) -> Iterator[TLSServer]:
    srv = TLSServer(pki)
    yield srv
    srv.close()


def _translator(environ: dict[str, str], **settings: Any) -> NomadTranslator:
    async def no_sleep(_: float) -> None:
        return None

    clock = FakeTime(sleep=no_sleep)
    return NomadTranslator(
        TranslatorContext(node_name="vk", settings=settings, clock=clock), environ=environ
    )


def _env(server: TLSServer, pki: Pki, **over: str) -> dict[str, str]:
    env = {
        "NOMAD_ADDR": server.address,
        "NOMAD_CACERT": str(pki.ca),
        "NOMAD_CLIENT_CERT": str(pki.client_cert),
        "NOMAD_CLIENT_KEY": str(pki.client_key),
        "NOMAD_TLS_SERVER_NAME": SERVER_NAME,
    }
    env.update(over)
    return {k: v for k, v in env.items() if v}


# --------------------------------------------------------------------------- settings


def test_every_tls_variable_of_a_nomad_shell_is_read() -> None:
    env = {
        "NOMAD_CACERT": "/etc/nomad/ca.pem",
        "NOMAD_CAPATH": "/etc/nomad/cas",
        "NOMAD_CLIENT_CERT": "/etc/nomad/cli.pem",
        "NOMAD_CLIENT_KEY": "/etc/nomad/cli-key.pem",
        "NOMAD_TLS_SERVER_NAME": SERVER_NAME,
        "NOMAD_SKIP_VERIFY": "t",  # Go's strconv.ParseBool, as the nomad CLI reads it
    }
    cfg = NomadConfig.from_settings({}, environ=env)
    assert (cfg.ca_cert, cfg.ca_path, cfg.client_cert, cfg.client_key) == (
        "/etc/nomad/ca.pem",
        "/etc/nomad/cas",
        "/etc/nomad/cli.pem",
        "/etc/nomad/cli-key.pem",
    )
    assert cfg.tls_server_name == SERVER_NAME and cfg.skip_verify is True
    table = NomadConfig.from_settings({"tls_server_name": "nomad.internal"}, environ=env)
    assert table.tls_server_name == "nomad.internal"


@pytest.mark.parametrize("key", ["ca_cert", "ca_path", "client_cert", "client_key"])
def test_pem_contents_are_refused_where_a_path_belongs(key: str) -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n"
    with pytest.raises(SettingsError, match=rf"^backend\.nomad\.{key}: expected a file path"):
        NomadConfig.from_settings({key: pem}, environ={})


def test_config_check_shows_the_tls_variables_and_masks_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var, value in {
        "NOMAD_ADDR": "https://127.0.0.1:4646",
        "NOMAD_TOKEN": "s3cret-token",
        "NOMAD_CAPATH": "/etc/nomad/cas",
        "NOMAD_TLS_SERVER_NAME": SERVER_NAME,
        "NOMAD_CLIENT_KEY": "/etc/nomad/cli-key.pem",
    }.items():
        monkeypatch.setenv(var, value)
    conf = tmp_path / "vkgate.toml"
    conf.write_text('[backend]\nkind = "nomad"\n')
    assert cli.main(["config", "check", str(conf)]) == 0
    out = capsys.readouterr().out
    table = out.split("[backend.nomad]\n", 1)[1]
    assert 'ca_path = "/etc/nomad/cas"  # env NOMAD_CAPATH' in table
    assert f'tls_server_name = "{SERVER_NAME}"  # env NOMAD_TLS_SERVER_NAME' in table
    assert 'client_key = "/etc/nomad/cli-key.pem"  # env NOMAD_CLIENT_KEY' in table
    assert 'token = "*****"  # env NOMAD_TOKEN' in table and "s3cret" not in out


def test_ca_cert_wins_over_ca_path_as_in_nomads_cli(pki: Pki, tmp_path: Path) -> None:
    cas = tmp_path / "cas"
    cas.mkdir()
    (cas / "other.pem").write_bytes(pki.other_ca.read_bytes())
    both = NomadConfig.from_settings(
        {"address": "https://x:4646", "ca_cert": str(pki.ca), "ca_path": str(cas)}, environ={}
    )
    ctx = ssl_context(both)
    assert isinstance(ctx, ssl.SSLContext)
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "nomad test CA"),),)]


def test_a_ca_path_file_that_is_not_pem_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("not a certificate")
    cfg = NomadConfig.from_settings(
        {"address": "https://x:4646", "ca_path": str(tmp_path)}, environ={}
    )
    with pytest.raises(SettingsError, match=r"^backend\.nomad\.ca_path: no PEM certificate in"):
        ssl_context(cfg)


# --------------------------------------------------------------------------- real handshakes


async def test_mutual_tls_with_the_server_name_works(server: TLSServer, pki: Pki) -> None:
    t = _translator(_env(server, pki))
    await t.ping()
    await t.close()
    assert set(server.server_names) == {SERVER_NAME}
    assert server.paths[:2] == ["/v1/status/leader", "/v1/agent/health"]


async def test_a_ca_directory_verifies_the_server(
    server: TLSServer, pki: Pki, tmp_path: Path
) -> None:
    cas = tmp_path / "cas"
    (cas / "sub").mkdir(parents=True)
    (cas / "a-other.pem").write_bytes(pki.other_ca.read_bytes())
    (cas / "sub" / "nomad-ca.crt").write_bytes(pki.ca.read_bytes())
    t = _translator(_env(server, pki, NOMAD_CACERT="", NOMAD_CAPATH=str(cas)))
    await t.ping()
    await t.close()


async def test_exec_uses_the_same_tls_and_server_name(server: TLSServer, pki: Pki) -> None:
    """The server's certificate has no IP SAN: without the server name the WebSocket could
    not verify it.  The 403 it then answers is named like any other refusal."""
    t = _translator(_env(server, pki))
    with pytest.raises(BackendAuthError, match=r"capability alloc-exec, and .*alloc-node-exec"):
        await NomadExecSession.open(
            t.client, alloc_id="a1", task="app", command=["sh"], tty=False,
            namespace="default", region="",
        )  # fmt: skip
    await t.close()
    assert server.server_names == [SERVER_NAME]
    assert server.paths == ["/v1/client/allocation/a1/exec"]


@pytest.mark.parametrize(
    ("over", "problem"),
    [
        (
            {"NOMAD_CACERT": "other"},
            "TLS: certificate verify failed: self-signed certificate in certificate chain "
            "(check ca_cert / ca_path (NOMAD_CACERT, NOMAD_CAPATH))",
        ),
        (
            {"NOMAD_CLIENT_CERT": "", "NOMAD_CLIENT_KEY": ""},
            "TLS: tlsv13 alert certificate required (the server wants a client certificate:"
            " client_cert and client_key (NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY))",
        ),
        (
            {"NOMAD_TLS_SERVER_NAME": ""},
            "TLS: certificate verify failed: IP address mismatch, certificate is not valid for"
            " '127.0.0.1' (set tls_server_name (NOMAD_TLS_SERVER_NAME) to a name in the"
            " server's certificate)",
        ),
    ],
    ids=["wrong-ca", "no-client-cert", "name-mismatch"],
)
async def test_a_tls_failure_is_one_line_not_retried_and_makes_the_node_not_ready(
    server: TLSServer,
    pki: Pki,
    caplog: pytest.LogCaptureFixture,
    over: dict[str, str],
    problem: str,
) -> None:
    env = _env(
        server, pki, **{k: str(pki.other_ca) if v == "other" else v for k, v in over.items()}
    )
    t = _translator(env)
    health = BackendHealth(t.ping, kind="nomad", timeout=30)
    caplog.set_level(logging.DEBUG)
    assert await health.check_once() is False
    line = f"nomad {server.address}: {problem}"
    assert health.healthy is False and health.message == f"nomad backend unreachable: {line}"
    with pytest.raises(BackendUnavailable) as err:
        await t.list()  # the pod side: the same line, and no retry of what cannot heal
    assert str(err.value) == line
    await t.close()
    assert server.handshakes == 2  # one per ping and one per list: nothing retried
    assert not [r for r in caplog.records if r.exc_info]


async def test_the_change_feed_backs_off_on_a_tls_failure_without_a_traceback(
    server: TLSServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """The notifier's resync loop under a TLS failure: each attempt is one handshake, the waits
    between them follow retry_backoff (no hot loop), and nothing is logged with a traceback."""
    delays: list[float] = []
    enough = asyncio.Event()

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) >= 6:
            enough.set()
        await asyncio.sleep(0)

    t = NomadTranslator(
        TranslatorContext(
            node_name="vk",
            settings={"retry_backoff": [0.2, 0.5, 1, 2]},
            clock=FakeTime(sleep=sleep),
        ),
        environ=_env(server, pki, NOMAD_CACERT=str(pki.other_ca)),
    )
    caplog.set_level(logging.DEBUG)
    feed = t.changes()
    consumer = asyncio.ensure_future(anext(feed))
    await asyncio.wait_for(enough.wait(), 10)
    consumer.cancel()
    await t.close()
    assert delays[:6] == [0.2, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert server.handshakes <= len(delays) + 1  # one attempt per wait, none retried inside
    assert not [r for r in caplog.records if r.exc_info]
    tls = [
        r.getMessage() for r in caplog.records if "TLS: certificate verify failed" in r.getMessage()
    ]
    assert tls and all("\n" not in m for m in tls)
