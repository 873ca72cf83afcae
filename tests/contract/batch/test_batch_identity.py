"""The Azure identity path: no shared key configured → azure-identity's DefaultAzureCredential,
whose environment credential (a client secret) gets a token from a Microsoft Entra token endpoint
served over TLS on loopback, and the Batch SDK calls the (fake) service with that bearer token.

The cloud metadata address is never contacted: the environment credential answers first, and a
guard on ``socket.connect`` fails the test if anything tries 169.254.169.254."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from batch_pods import Sleeps, make_pod
from fake_batch import FakeBatch
from fake_entra import EntraTokenServer

from tests.fake_time import FakeTime
from translators.base import BackendAuthError, TranslatorContext
from translators.batch import BatchTranslator

pytestmark = pytest.mark.contract

METADATA = {"169.254.169.254", "fd00:ec2::254"}
TENANT, APP, SECRET = "tenant-1", "app-1", "s3cret-value"


@pytest.fixture
def metadata_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Refuse (and record) any connection to the cloud metadata address."""
    attempts: list[Any] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse(address: Any) -> None:
        if isinstance(address, tuple) and address and address[0] in METADATA:
            attempts.append(address)
            raise OSError(f"test guard: connection to the metadata address {address!r}")

    def connect(self: socket.socket, address: Any) -> None:
        refuse(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        refuse(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield attempts
    assert attempts == [], "the cloud metadata address was contacted"


@pytest.fixture
def entra(tmp_path, fake: FakeBatch, monkeypatch: pytest.MonkeyPatch) -> Iterator[EntraTokenServer]:
    for key in ("AZURE_USERNAME", "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    with EntraTokenServer(
        tmp_path,
        tenant=TENANT,
        client_id=APP,
        client_secret=SECRET,
        on_token=fake.bearer_tokens.add,
    ) as server:
        monkeypatch.setenv("AZURE_TENANT_ID", TENANT)
        monkeypatch.setenv("AZURE_CLIENT_ID", APP)
        monkeypatch.setenv("AZURE_CLIENT_SECRET", SECRET)
        monkeypatch.setenv("AZURE_AUTHORITY_HOST", server.url)
        yield server


def identity_translator(fake: FakeBatch, entra: EntraTokenServer) -> BatchTranslator:
    """No account_key anywhere: ``auth = "auto"`` resolves to the identity path.  One httpx
    client serves both: the loopback authority over real TLS (trusting the test CA), the Batch
    service through the in-process fake."""
    client = httpx.AsyncClient(
        mounts={
            entra.url: httpx.AsyncHTTPTransport(
                verify=ssl.create_default_context(cafile=str(entra.ca_file))
            ),
            "all://": httpx.MockTransport(fake.handle),
        }
    )
    settings = {"endpoint": fake.endpoint, "pool_id": "pool-1", "submit_linger": 0}
    clock = FakeTime(now=lambda: fake.now, sleep=Sleeps())
    return BatchTranslator(
        TranslatorContext(node_name="vk-batch", settings=settings, clock=clock),
        http_client=client,
        environ={},
    )


async def test_default_azure_credential_gets_a_token_on_loopback_and_batch_accepts_it(
    fake: FakeBatch, entra: EntraTokenServer, metadata_guard: list[Any]
) -> None:
    t = identity_translator(fake, entra)
    try:
        assert t.settings.auth == "azure_identity"
        await t.start()
        await t.create(make_pod("with-identity"))
        assert [s.ref.name for s in await t.list()] == ["with-identity"]
    finally:
        await t.close()
    (path, form), *_ = entra.forms
    assert path == f"/{TENANT}/oauth2/v2.0/token"
    assert form["scope"] == "https://batch.core.windows.net//.default"
    assert len(entra.forms) == 1  # the token is cached across calls
    assert fake.bearer_requests >= 3 and fake.auth_failures == 0
    assert fake.jobs["vkgate-vk-batch"]["poolInfo"] == {"poolId": "pool-1"}


async def test_a_rejected_client_secret_is_an_auth_error(
    fake: FakeBatch, entra: EntraTokenServer, metadata_guard: list[Any], monkeypatch
) -> None:
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "wrong")
    t = identity_translator(fake, entra)
    try:
        with pytest.raises(BackendAuthError):
            await t.create(make_pod("denied"))
    finally:
        await t.close()
    assert entra.forms and fake.bearer_requests == 0


def test_the_metadata_guard_refuses_the_metadata_address(metadata_guard: list[Any]) -> None:
    with socket.socket() as sock, pytest.raises(OSError, match="test guard"):
        sock.connect(("169.254.169.254", 80))
    assert metadata_guard == [("169.254.169.254", 80)]
    metadata_guard.clear()  # seen, so the fixture's own check passes
