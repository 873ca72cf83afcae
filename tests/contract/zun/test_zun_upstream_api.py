"""The Zun tier against Zun's own API code: every request vkgate sends at each microversion it
negotiates is answered by Zun's real API layer (tests/contract/zun/zun_upstream.py) before the
fake's compute imitation, and what Zun's API refuses reaches vkgate as Zun words it."""

from __future__ import annotations

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from translators.base import BackendAuthError, LogOptions, PodRef
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract


def upstream_or_skip(fake: FakeOpenStack) -> None:
    if fake.upstream is None:
        pytest.skip("the zun package (test extra zun-server) is not installed")


@pytest.mark.parametrize("server_max", ["1.12", "1.30", "1.33", "1.40"])
async def test_a_pod_lifecycle_passes_zuns_api_at_each_negotiated_microversion(
    make_translator, fake: FakeOpenStack, clock: FakeClock, server_max: str
) -> None:
    upstream_or_skip(fake)
    fake.set_versions("1.1", server_max)
    zun = await make_translator()
    pod = simple_pod("life", command=["sh", "-c"], args=["echo hi"], ports=[{"containerPort": 80}])
    await zun.create(resolved_pod(pod))
    await clock.advance(3)
    (state,) = await zun.list()
    assert state.containers[0].started_at is not None  # Zun's view has no started_at
    ref = PodRef("default", "life", pod["metadata"]["uid"])
    chunks = [c async for c in zun.logs(ref, "app", LogOptions(timestamps=True, tail_lines=5))]
    assert chunks is not None
    await zun.delete(ref, grace_seconds=0)
    zun_calls = [  # by uuid; a lookup by name (adoption) is answered by the fake alone
        (m, p)
        for m, p, _ in fake.requests
        if p.startswith("/container/v1/") and not p.endswith("/vkgate-default-life")
    ]
    answered = [(m, p) for m, p, s in fake.upstream_answers]
    assert zun_calls and all(call in answered for call in zun_calls)
    assert all(s < 400 for _, _, s in fake.upstream_answers), fake.upstream_answers
    assert zun.client.version == tuple(int(x) for x in server_max.split("."))


async def test_pull_policy_and_ports_with_security_groups_pass_zuns_api_as_a_member(
    make_translator, fake: FakeOpenStack
) -> None:
    upstream_or_skip(fake)
    zun = await make_translator(security_groups=["web"])
    pod = simple_pod("web", imagePullPolicy="Always", ports=[{"containerPort": 80}])
    await zun.create(resolved_pod(pod))
    sent = next(iter(fake.containers.values()))
    assert sent.get("image_pull_policy") is None and not sent.get("exposed_ports")
    assert ("POST", "/container/v1/containers", 202) in fake.upstream_answers


async def test_zuns_own_refusal_reaches_vkgate(make_translator, fake: FakeOpenStack) -> None:
    """send_image_pull_policy with member credentials: Zun's policy says 403."""
    upstream_or_skip(fake)
    zun = await make_translator(send_image_pull_policy=True)
    with pytest.raises(BackendAuthError, match="image_pull_policy"):
        await zun.create(resolved_pod(simple_pod("pull", imagePullPolicy="Always")))
    assert fake.containers == {}
    assert ("POST", "/container/v1/containers", 403) in fake.upstream_answers
