"""The fake itself answers like the service where vkgate's client would not go on its own:
collection limits, TaskExists on a single add, filter validation, signature coverage."""

from __future__ import annotations

import httpx
import pytest
from azure.batch import models
from azure.batch.aio import BatchClient
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import HttpResponseError, ResourceExistsError
from fake_batch import FakeBatch

from translators.batch.transport import HttpxTransport

pytestmark = pytest.mark.contract


@pytest.fixture
async def sdk(fake: FakeBatch):
    fake.date_skew = None  # the SDK stamps ocp-date from the wall clock here
    fake.jobs["j"] = {"id": "j", "poolInfo": {"poolId": "pool-1"}, "state": "active"}
    fake.tasks["j"] = {}
    client = BatchClient(
        fake.endpoint,
        AzureNamedKeyCredential(fake.account, fake.key),
        transport=HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))),
        retry_total=0,
    )
    yield client
    await client.close()


def task(i: int) -> models.BatchTaskCreateOptions:
    return models.BatchTaskCreateOptions(
        {"id": f"t{i}", "commandLine": "", "containerSettings": {"imageName": "busybox"}}
    )


async def test_more_than_100_tasks_is_request_body_too_large(sdk: BatchClient) -> None:
    with pytest.raises(HttpResponseError) as err:
        await sdk.create_task_collection(
            "j", models.BatchTaskGroup(task_values=[task(i) for i in range(101)])
        )
    assert err.value.status_code == 413 and err.value.error.code == "RequestBodyTooLarge"
    ok = await sdk.create_task_collection(
        "j", models.BatchTaskGroup(task_values=[task(i) for i in range(100)])
    )
    assert [r["status"] for r in ok.as_dict()["value"]] == ["success"] * 100


async def test_single_add_of_an_existing_task_is_409(sdk: BatchClient) -> None:
    await sdk.create_task("j", task(1))
    with pytest.raises(ResourceExistsError) as err:
        await sdk.create_task("j", task(1))
    assert err.value.error.code == "TaskExists"
    result = await sdk.create_task_collection(
        "j", models.BatchTaskGroup(task_values=[task(1), task(2)])
    )
    by_id = {r["taskId"]: r for r in result.as_dict()["value"]}
    assert by_id["t1"]["status"] == "clienterror" and by_id["t1"]["error"]["code"] == "TaskExists"
    assert by_id["t2"]["status"] == "success"


async def test_filter_on_a_property_the_service_does_not_filter_is_400(sdk: BatchClient) -> None:
    with pytest.raises(HttpResponseError) as err:
        [t async for t in sdk.list_tasks("j", filter="displayName eq 'x'")]
    assert err.value.status_code == 400


async def test_container_settings_required_on_a_container_pool(sdk: BatchClient) -> None:
    bare = models.BatchTaskCreateOptions({"id": "bare", "commandLine": "echo"})
    with pytest.raises(HttpResponseError) as err:
        await sdk.create_task("j", bare)
    assert err.value.status_code == 400


async def test_signature_covers_the_body_length(fake: FakeBatch) -> None:
    """A request signed for one body and sent with another is refused."""
    fake.date_skew = None
    signed = httpx.Request(
        "POST",
        f"{fake.endpoint}/jobs?api-version=2025-06-01",
        headers={"content-type": "application/json", "ocp-date": "Sun, 01 Mar 2026 10:00:00 GMT"},
        content=b'{"id": "a"}',
    )
    sig = fake.sign(fake.string_to_sign(signed, "/jobs"))
    tampered = httpx.Request(
        "POST",
        signed.url,
        headers={**dict(signed.headers), "authorization": f"SharedKey {fake.account}:{sig}"},
        content=b'{"id": "abc"}',
    )
    tampered.headers["content-length"] = str(len(tampered.content))
    assert fake.handle(tampered).status_code == 403
    good = httpx.Request(
        "POST",
        signed.url,
        headers={**dict(signed.headers), "authorization": f"SharedKey {fake.account}:{sig}"},
        content=b'{"id": "a"}',
    )
    assert fake.handle(good).status_code != 403
