"""Capsules (multi-container pods, init containers), logs (tail, timestamps, follow by
polling) and exec (one-shot with exit code, interactive over a WebSocket)."""

from __future__ import annotations

import asyncio
import datetime as _dt

import pytest
from fake_zun import FakeOpenStack
from zun_pods import resolved_pod, simple_pod

from translators.base import BackendRejected, LogOptions, Phase, UnsupportedError
from translators.zun import ZunTranslator
from vkgate_core.clock import FakeClock

pytestmark = pytest.mark.contract


def capsule_pod() -> dict:
    pod = simple_pod(
        "multi",
        "nginx:1.27",
        restart="Always",
        resources={"requests": {"cpu": "500m", "memory": "256Mi"}},
    )
    pod["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox:side", "command": ["sleep", "1d"]}
    )
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox:init", "command": ["sh", "-c", "true"]}
    ]
    return pod


async def collect(gen) -> bytes:
    return b"".join([chunk async for chunk in gen])


async def test_capsule_with_init_container_runs_init_first_and_maps_names_by_index(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.script("busybox:init", run_seconds=1, exit_code=0)
    pod = resolved_pod(capsule_pod())
    state = await zun.create(pod)
    assert state.backend_id.startswith("capsule/")
    (cap,) = fake.capsules.values()
    assert cap["annotations"]["vkgate.containers"] == "app,sidecar"
    assert cap["annotations"]["vkgate.init-containers"] == "init"
    members = [fake.containers[u] for u in fake._cap_priv[cap["uuid"]]["main"]]
    assert all(
        m["name"].startswith("capsule-vkgate-default-multi-") for m in members
    )  # renamed by Zun
    assert members[1]["command"] == ["sleep", "1d"]

    await clock.advance(2.5)  # init running, mains waiting
    (st,) = await zun.list()
    assert st.phase is Phase.PENDING
    assert st.init_containers[0].state == "running"
    assert [c.reason for c in st.containers] == ["PodInitializing", "PodInitializing"]

    for _ in range(12):
        await clock.advance(0.5)
    (st,) = await zun.list()
    assert st.phase is Phase.RUNNING
    assert [c.name for c in st.containers] == ["app", "sidecar"]
    assert all(c.state == "running" for c in st.containers)
    (init,) = st.init_containers
    assert (init.name, init.state, init.exit_code, init.reason) == (
        "init",
        "terminated",
        0,
        "Completed",
    )
    assert st.pod_ip.startswith("10.0.0.")

    with pytest.raises(UnsupportedError, match="capsule"):
        await collect(zun.logs(pod.ref, "app", LogOptions()))
    with pytest.raises(UnsupportedError, match="capsule"):
        await zun.exec(pod.ref, "sidecar", ["ls"], tty=False, stdin=False)

    await zun.delete(pod.ref, grace_seconds=30)
    assert fake.count("DELETE", f"/container/v1/capsules/{cap['uuid']}") == 1
    await clock.advance(2)
    assert await zun.list() == []


async def test_failing_init_container_fails_the_capsule(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.script("busybox:init", run_seconds=1, exit_code=2)
    pod = capsule_pod()
    pod["spec"]["restartPolicy"] = "Never"
    await zun.create(resolved_pod(pod))
    for _ in range(10):
        await clock.advance(0.5)
    (st,) = await zun.list()
    assert st.phase is Phase.FAILED
    assert st.init_containers[0].exit_code == 2


async def test_logs_tail_timestamps_and_streams(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    fake.script("busybox:1.36", logs=("one", "two", "stderr:oops", "three"))
    pod = resolved_pod(simple_pod("talk", restart="Always"))
    await zun.create(pod)
    await clock.advance(3)
    await zun.list()
    assert await collect(zun.logs(pod.ref, "app", LogOptions())) == b"one\ntwo\noops\nthree\n"
    assert await collect(zun.logs(pod.ref, "app", LogOptions(tail_lines=2))) == b"oops\nthree\n"
    assert await collect(zun.logs(pod.ref, "app", LogOptions(stream="Stderr"))) == b"oops\n"
    stamped = await collect(zun.logs(pod.ref, "app", LogOptions(timestamps=True, limit_bytes=40)))
    assert stamped == b"2026-03-01T10:00:02Z one\n2026-03-01T10:0"  # limitBytes=40 cuts here
    full = await collect(zun.logs(pod.ref, "app", LogOptions(timestamps=True)))
    assert full.splitlines()[1] == b"2026-03-01T10:00:02.001Z two"
    with pytest.raises(BackendRejected, match="previous"):
        await collect(zun.logs(pod.ref, "app", LogOptions(previous=True)))
    with pytest.raises(Exception, match="not part of pod"):
        await collect(zun.logs(pod.ref, "nope", LogOptions()))


async def test_follow_polls_with_since_until_the_container_exits(
    make_translator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    zun = await make_translator(log_poll_interval=1)
    fake.script("busybox:1.36", run_seconds=6, exit_code=0, logs=("start",))
    pod = resolved_pod(simple_pod("follow"))
    await zun.create(pod)
    await clock.advance(2.5)
    await zun.list()
    (uuid,) = fake.containers
    got: list[bytes] = []

    async def reader() -> None:
        async for chunk in zun.logs(pod.ref, "app", LogOptions(follow=True)):
            got.append(chunk)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)
    await clock.advance(1)
    assert got == [b"start\n"]
    fake._priv[uuid].logs.append((fake.now(), "stdout", "later"))
    for _ in range(8):
        await clock.advance(1)
    await asyncio.wait_for(task, 1)
    assert got == [b"start\n", b"later\n"]  # no duplicates, ends after the exit
    sinces = [q.get("since") for m, p, q in fake.requests if p.endswith(f"{uuid}/logs")]
    assert sinces[0] is None and all(s for s in sinces[1:])


async def test_exec_one_shot_returns_output_and_exit_code(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    pod = resolved_pod(simple_pod("shell", restart="Always"))
    await zun.create(pod)
    with pytest.raises(BackendRejected, match="not running"):
        await zun.exec(pod.ref, "app", ["ls"], tty=False, stdin=False)
    await clock.advance(3)
    session = await zun.exec(
        pod.ref, "app", ["sh", "-c", "echo 'a b'; exit 3"], tty=False, stdin=False
    )
    out = [chunk async for chunk in session.output()]
    assert await session.wait() == 3
    assert out == [(1, b'ran ["sh", "-c", "echo \'a b\'; exit 3"]\n')]
    assert fake.exec_calls[-1]["command"] == "sh -c 'echo '\"'\"'a b'\"'\"'; exit 3'"


async def test_interactive_exec_relays_over_the_websocket(
    zun: ZunTranslator, fake: FakeOpenStack, clock: FakeClock
) -> None:
    from websockets.asyncio.server import serve

    async def shell(ws) -> None:
        async for message in ws:
            data = message if isinstance(message, bytes) else message.encode()
            if data.strip() == b"exit":
                await ws.close()
                return
            await ws.send(b"echo:" + data)

    async with serve(shell, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        fake.ws_url = f"ws://127.0.0.1:{port}/"
        pod = resolved_pod(simple_pod("tty", restart="Always"))
        await zun.create(pod)
        await clock.advance(3)
        session = await zun.exec(pod.ref, "app", ["sh"], tty=True, stdin=True)
        await session.write_stdin(b"hi")
        await session.resize(120, 40)
        out = session.output()
        assert await asyncio.wait_for(anext(out), 5) == (1, b"echo:hi")
        await session.write_stdin(b"exit")
        assert [c async for c in out] == []
        assert await asyncio.wait_for(session.wait(), 5) == 0
    call = fake.exec_calls[-1]
    assert (call["run"], call["interactive"]) == (False, True)
    assert fake.count("POST", f"/container/v1/containers/{call['uuid']}/execute_resize") == 1


async def test_interactive_exec_without_a_websocket_url_is_unsupported(
    zun: ZunTranslator, clock: FakeClock
) -> None:
    pod = resolved_pod(simple_pod("notty", restart="Always"))
    await zun.create(pod)
    await clock.advance(3)
    with pytest.raises(UnsupportedError, match="WebSocket"):
        await zun.exec(pod.ref, "app", ["sh"], tty=True, stdin=True)


def test_fake_times_are_zun_formatted() -> None:
    from fake_zun import T0, zun_time

    assert zun_time(T0 + _dt.timedelta(seconds=1)) == "2026-03-01 10:00:01+00:00"
