"""The Zun translator against the stateful fake: create → running → exit → WorkloadState."""

from __future__ import annotations

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from translators.base import Phase
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract


async def test_never_pod_exit_3_is_failed_with_exit_code_3(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.script("busybox:1.36", run_seconds=5, exit_code=3, logs=("hello",))
    pod = resolved_pod(simple_pod("job", command=["sh", "-c"], args=["echo hello; exit 3"]))

    state = await zun.create(pod)
    assert state.phase is Phase.PENDING
    assert state.containers[0].reason == "ContainerCreating"
    assert state.containers[0].message == "pulling image"
    sent = next(c for c in fake.containers.values())
    assert sent["entrypoint"] == ["sh", "-c"]
    assert sent["command"] == ["echo hello; exit 3"]
    assert sent["restart_policy"]["Name"] == "no"

    await clock.advance(2.5)
    (running,) = await zun.list()
    assert running.phase is Phase.RUNNING
    assert running.containers[0].state == "running"
    assert running.containers[0].ready
    assert running.pod_ip.startswith("10.0.0.")

    await clock.advance(6)
    (done,) = await zun.list()
    c = done.containers[0]
    assert done.phase is Phase.FAILED
    assert (c.state, c.exit_code, c.reason) == ("terminated", 3, "Error")
    assert c.started_at is not None and c.finished_at is not None
    assert c.container_id == f"zun://{sent['uuid']}"


async def test_never_pod_exit_0_is_succeeded(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.script("busybox:1.36", run_seconds=1, exit_code=0)
    await zun.create(resolved_pod(simple_pod("ok")))
    await clock.advance(5)
    (st,) = await zun.list()
    assert st.phase is Phase.SUCCEEDED
    assert (st.containers[0].exit_code, st.containers[0].reason) == (0, "Completed")


async def test_onfailure_pod_restarts_then_fails_after_max_retries(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    zun = await make_translator(on_failure_max_retries=2)
    fake.script("busybox:1.36", run_seconds=3, exit_code=1)
    await zun.create(resolved_pod(simple_pod("retry", restart="OnFailure")))
    sent = next(iter(fake.containers.values()))
    assert sent["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": "2"}

    await clock.advance(5.5)  # created 1s, started 2s, exited 5s → Restarting
    (st,) = await zun.list()
    c = st.containers[0]
    assert st.phase is Phase.RUNNING
    assert (c.state, c.reason, c.restart_count) == ("waiting", "CrashLoopBackOff", 1)
    assert c.last_terminated is not None and c.last_terminated.exit_code == 1

    await clock.advance(2)  # restarted → Running again
    (st,) = await zun.list()
    assert st.containers[0].state == "running"
    assert st.containers[0].restart_count == 1

    for _ in range(6):  # second failure + restart, third failure → retries used up
        await clock.advance(1.5)
        (st,) = await zun.list()
    assert st.phase is Phase.FAILED
    assert st.containers[0].exit_code == 1
    assert st.containers[0].restart_count == 2


async def test_always_pod_exiting_0_is_restarted_and_counted(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.script("nginx:1.27", run_seconds=4, exit_code=0)
    await zun.create(resolved_pod(simple_pod("web", "nginx:1.27", restart="Always")))
    assert next(iter(fake.containers.values()))["restart_policy"]["Name"] == "always"
    seen = []
    for _ in range(10):
        await clock.advance(1)
        (st,) = await zun.list()
        seen.append(
            (st.containers[0].state, st.containers[0].reason, st.containers[0].restart_count)
        )
    assert ("waiting", "CrashLoopBackOff", 1) in seen
    assert seen[-1][0] == "running" and seen[-1][2] >= 1
    assert st.phase is Phase.RUNNING


async def test_image_pull_error_fails_the_pod_with_err_image_pull(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    reason = 'Docker internal error: 404 Client Error: Not Found ("pull access denied for nosuch, repository does not exist")'
    fake.script("nosuch:latest", pull_error=reason)
    await zun.create(resolved_pod(simple_pod("bad", "nosuch:latest")))
    await clock.advance(2)
    (st,) = await zun.list()
    assert st.phase is Phase.FAILED
    assert st.reason == "ErrImagePull"
    assert st.containers[0].reason == "ErrImagePull"
    assert "pull access denied" in st.containers[0].message


async def test_image_refused_at_create_is_a_rejection_with_err_image_pull(
    zun: ZunTranslator, fake: FakeOpenStack
) -> None:
    from translators.base import BackendRejected

    fake.api_missing_images.add("ghost:1")
    with pytest.raises(BackendRejected) as info:
        await zun.create(resolved_pod(simple_pod("ghost", "ghost:1")))
    assert info.value.reason == "ErrImagePull"
    assert "Image ghost:1 could not be found" in str(info.value)
