"""Pod lifecycle on the fake Batch service: job creation, each restartPolicy, failures, init
containers, deadlines — asserted on the WorkloadState the gateway would turn into PodStatus."""

from __future__ import annotations

import pytest
from batch_pods import container, make_pod
from fake_batch import Behaviour, FakeBatch

from translators.base import EnvVar, Phase, UnsupportedError, WorkloadState
from translators.batch import BatchTranslator

pytestmark = pytest.mark.contract


async def states_by_step(t: BatchTranslator, fake: FakeBatch, steps: int) -> list[WorkloadState]:
    out = []
    for _ in range(steps):
        fake.step()
        (state,) = await t.list()
        out.append(state)
    return out


async def test_job_is_created_once_with_noaction(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await t.start()
    job = fake.jobs["vkgate-vk-batch"]
    assert job["poolInfo"] == {"poolId": "pool-1"}
    assert job["onAllTasksComplete"] == "noaction"
    assert job["usesTaskDependencies"] is True
    assert {"name": "vkgate.io/owner", "value": "vkgate"} in job["metadata"]
    assert {"name": "vkgate.io/node", "value": "vk-batch"} in job["metadata"]

    again = make_translator()  # a restarted gateway finds the job
    await again.start()
    await again.create(make_pod("after-restart"))
    assert fake.count("POST", "/jobs") == 1


async def test_never_exit_0_goes_queued_creating_running_succeeded(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    created = await t.create(make_pod(restart="Never", command=("echo",), args=("hi",)))
    assert created.phase is Phase.PENDING
    assert created.containers[0].reason == "Queued"
    (task,) = fake.all_tasks(t.job_id)
    assert task["constraints"]["maxTaskRetryCount"] == 0

    preparing, running, done = await states_by_step(t, fake, 3)
    assert (preparing.phase, preparing.containers[0].reason) == (Phase.PENDING, "ContainerCreating")
    assert preparing.placed and preparing.host_ip == "10.0.0.4"
    assert running.phase is Phase.RUNNING
    assert running.containers[0].state == "running" and running.containers[0].ready
    assert running.containers[0].started_at is not None
    assert done.phase is Phase.SUCCEEDED
    c = done.containers[0]
    assert (c.state, c.exit_code, c.reason) == ("terminated", 0, "Completed")
    assert c.finished_at is not None and c.finished_at > c.started_at
    assert c.container_id == f"batch://{t.job_id}/{task['id']}"
    assert done.pod_ip == done.host_ip == "10.0.0.4"


async def test_exit_3_fails_the_pod_with_exit_code_3(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await t.create(make_pod(env=(EnvVar("FAKE_BATCH_EXIT_CODES", "3"),)))
    fake.settle()
    (state,) = await t.list()
    assert state.phase is Phase.FAILED
    c = state.containers[0]
    assert (c.state, c.exit_code, c.reason) == ("terminated", 3, "Error")
    assert "exit code representing a failure" in c.message
    assert c.restart_count == 0


async def test_on_failure_retries_then_succeeds_with_restart_count(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator(on_failure_retries=2)
    fake.script("default/flaky/", Behaviour(exit_codes=[1, 1, 0]))
    await t.create(make_pod("flaky", restart="OnFailure"))
    (task,) = fake.all_tasks(t.job_id)
    assert task["constraints"]["maxTaskRetryCount"] == 2

    seen = await states_by_step(t, fake, 10)
    crash = next(s for s in seen if s.containers[0].reason == "CrashLoopBackOff")
    assert crash.phase is Phase.RUNNING  # it has run; Kubernetes keeps OnFailure pods Running
    assert crash.containers[0].restart_count == 1
    assert crash.containers[0].last_terminated is not None
    assert crash.containers[0].last_terminated.exit_code == 1
    final = seen[-1]
    assert final.phase is Phase.SUCCEEDED
    assert final.containers[0].restart_count == 2


async def test_on_failure_exhausted_retries_fail(fake: FakeBatch, make_translator) -> None:
    t = make_translator(on_failure_retries=1)
    await t.create(make_pod(restart="OnFailure", env=(EnvVar("FAKE_BATCH_EXIT_CODES", "4"),)))
    fake.settle()
    (state,) = await t.list()
    assert state.phase is Phase.FAILED
    assert (state.containers[0].exit_code, state.containers[0].restart_count) == (4, 1)


async def test_always_is_unlimited_retries_best_effort(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await t.create(make_pod(restart="Always", env=(EnvVar("FAKE_BATCH_EXIT_CODES", "1,1,1,0"),)))
    (task,) = fake.all_tasks(t.job_id)
    assert task["constraints"]["maxTaskRetryCount"] == -1
    fake.settle()
    (state,) = await t.list()
    # Batch cannot restart a task that exited 0: the documented best effort ends Succeeded.
    assert state.phase is Phase.SUCCEEDED
    assert state.containers[0].restart_count == 3


async def test_always_can_be_rejected(make_translator) -> None:
    t = make_translator(always="reject")
    with pytest.raises(UnsupportedError) as err:
        await t.create(make_pod(restart="Always"))
    assert err.value.reason == "UnsupportedRestartPolicy"


async def test_image_pull_failure_is_err_image_pull(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    await t.create(make_pod(image="nosuch/image", env=(EnvVar("FAKE_BATCH_PULL_ERROR", "1"),)))
    fake.settle()
    (state,) = await t.list()
    assert state.phase is Phase.FAILED
    c = state.containers[0]
    assert c.state == "terminated" and c.reason == "ErrImagePull"
    assert "ContainerInvalidImage" in c.message and "pull access denied" in c.message


async def test_active_deadline_becomes_max_wall_clock_time(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    fake.script("default/slow/", Behaviour(forever=True))
    await t.create(make_pod("slow", deadline=3))
    (task,) = fake.all_tasks(t.job_id)
    assert task["constraints"]["maxWallClockTime"] == "PT3S"
    fake.step(8)
    (state,) = await t.list()
    assert state.phase is Phase.FAILED
    assert state.reason == "DeadlineExceeded"
    assert state.containers[0].reason == "DeadlineExceeded"


async def test_init_containers_run_in_sequence_before_main(
    fake: FakeBatch, make_translator
) -> None:
    t = make_translator()
    pod = make_pod(
        "with-init",
        init=(container("fetch", role="init"), container("migrate", role="init")),
        containers=(container("app"),),
    )
    await t.create(pod)
    tasks = {task["displayName"].rsplit("/", 1)[1]: task for task in fake.all_tasks(t.job_id)}
    i0, i1, main = tasks["init:0:fetch"], tasks["init:1:migrate"], tasks["app"]
    assert "dependsOn" not in i0
    assert i1["dependsOn"] == {"taskIds": [i0["id"]]}
    assert main["dependsOn"] == {"taskIds": [i0["id"], i1["id"]]}

    fake.step()
    (state,) = await t.list()
    assert state.phase is Phase.PENDING
    assert state.containers[0].reason == "PodInitializing"
    assert [c.name for c in state.init_containers] == ["fetch", "migrate"]

    fake.settle()
    (state,) = await t.list()
    assert state.phase is Phase.SUCCEEDED
    assert all(c.exit_code == 0 for c in state.init_containers)
    assert state.init_containers[1].finished_at <= state.containers[0].started_at


async def test_failed_init_container_fails_the_pod(fake: FakeBatch, make_translator) -> None:
    t = make_translator()
    fake.script(lambda task: ":setup" in task.get("displayName", ""), Behaviour(exit_codes=[2]))
    await t.create(make_pod("bad-init", init=(container("setup", role="init"),)))
    fake.settle(limit=10)
    (state,) = await t.list()
    assert state.phase is Phase.FAILED
    assert state.init_containers[0].exit_code == 2
    assert state.containers[0].reason == "PodInitializing"
    assert "FailureExitCode" in state.message
