"""Reflector: list+watch, bookmarks, 410 relist diff, inactivity re-watch, backoff (fake clock)."""

from __future__ import annotations

import asyncio
import copy
import json
import random
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest

from gateway.kube.client import KubeClient, KubeConfig, RetryPolicy
from gateway.kube.reflector import Reflector
from gateway.kube.reflector import lean as cache_lean
from tests.kube_loopback import StartApi
from vkgate_core.clock import FakeClock

PATH = "/api/v1/pods"


def pod(name: str, rv: str, uid: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "resourceVersion": rv,
            "uid": uid or f"u-{name}",
        }
    }


class WatchServer:
    """Lists come from ``lists`` (the last one repeats); every watch gets a queue the test feeds.
    ``None`` in a queue closes that watch cleanly; ``watch_errors`` answers watches with a status."""

    def __init__(self) -> None:
        self.lists: list[dict[str, Any]] = []
        self.list_calls = 0
        self.watches: list[tuple[dict[str, str], asyncio.Queue[Any]]] = []
        self.watch_errors: list[int] = []

    async def handler(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        if params.get("watch") != "true":
            self.list_calls += 1
            page = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
            return httpx.Response(200, json=page)
        if self.watch_errors:
            code = self.watch_errors.pop(0)
            return httpx.Response(
                code, json={"kind": "Status", "code": code, "reason": "X", "message": "m"}
            )
        q: asyncio.Queue[Any] = asyncio.Queue()
        self.watches.append((params, q))

        async def body() -> AsyncIterator[bytes]:
            while True:
                item = await q.get()
                if item is None:
                    return
                yield (json.dumps(item) + "\n").encode()

        return httpx.Response(200, content=body())

    def send(self, etype: str, obj: dict[str, Any]) -> None:
        self.watches[-1][1].put_nowait({"type": etype, "object": obj})

    def close(self) -> None:
        self.watches[-1][1].put_nowait(None)


async def settle(n: int = 100) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def advance(clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    await settle()
    while seconds > 1e-9:
        d = min(step, seconds)
        await clock.advance(d)
        await settle()
        seconds -= d


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server() -> WatchServer:
    s = WatchServer()
    s.lists = [{"items": [pod("a", "1"), pod("b", "2")], "metadata": {"resourceVersion": "10"}}]
    return s


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []

    async def __call__(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = obj["metadata"]["name"]
        self.events.append((etype, name, old["metadata"]["resourceVersion"] if old else None))


async def make_client(
    loopback: StartApi, server: WatchServer, clock: FakeClock, **kw: Any
) -> KubeClient:
    """A client on the lean path, against ``server`` on a loopback socket."""
    api = await loopback(server.handler)
    kw.setdefault("retry", RetryPolicy(delays=()))
    return KubeClient(KubeConfig(server=api.url), clock=clock, qps=0, **kw)


@pytest.fixture
async def running(
    server: WatchServer, clock: FakeClock, loopback: StartApi
) -> AsyncIterator[tuple[Reflector, Recorder]]:
    client = await make_client(loopback, server, clock)
    refl = Reflector(
        client,
        PATH,
        params={"fieldSelector": "spec.nodeName=vk"},
        clock=clock,
        inactivity_timeout=60,
        rng=random.Random(3),
    )
    rec = Recorder()
    task = asyncio.create_task(refl.run(rec))
    await settle()
    yield refl, rec
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


async def test_initial_list_adds_and_syncs_then_watches_from_list_rv(running, server: WatchServer):
    refl, rec = running
    assert refl.synced.is_set()
    assert rec.events == [("ADDED", "a", None), ("ADDED", "b", None)]
    assert set(refl.store) == {"ns/a", "ns/b"}
    params = server.watches[0][0]
    assert params["resourceVersion"] == "10"
    assert params["allowWatchBookmarks"] == "true"
    assert params["fieldSelector"] == "spec.nodeName=vk"
    assert 240 <= int(params["timeoutSeconds"]) <= 360


async def test_watch_events_update_store_and_call_handler(running, server: WatchServer):
    refl, rec = running
    rec.events.clear()
    server.send("ADDED", pod("c", "11"))
    server.send("MODIFIED", pod("a", "12"))
    server.send("DELETED", pod("b", "13"))
    await settle()
    assert rec.events == [("ADDED", "c", None), ("MODIFIED", "a", "1"), ("DELETED", "b", "2")]
    assert set(refl.store) == {"ns/a", "ns/c"}
    assert refl.resource_version == "13"


def with_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A pod as the API server sends it: server-side-apply bookkeeping plus fields we read."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:x": {}}}}
    ]
    obj["metadata"].update(labels={"app": "web"}, annotations={"vkgate.io/sim-exit-code": "0"})
    obj["spec"] = {"nodeName": "vk", "containers": [{"name": "app", "image": "busybox"}]}
    obj["status"] = {"phase": "Pending"}
    return obj


async def test_cached_objects_carry_no_managed_fields_and_everything_else(
    server: WatchServer, clock: FakeClock, loopback: StartApi
):
    listed = with_managed_fields(pod("a", "1"))
    server.lists = [{"items": [copy.deepcopy(listed)], "metadata": {"resourceVersion": "10"}}]
    client = await make_client(loopback, server, clock)
    refl = Reflector(client, PATH, clock=clock, rng=random.Random(1))
    seen: list[dict[str, Any]] = []

    async def handler(etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        seen.append(obj)

    task = asyncio.create_task(refl.run(handler))
    await settle()
    watched = with_managed_fields(pod("b", "11"))
    server.send("ADDED", watched)
    server.send("MODIFIED", with_managed_fields(pod("a", "12")))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()

    def lean(obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        del out["metadata"]["managedFields"]
        return out

    assert len(seen) == 3 and set(refl.store) == {"ns/a", "ns/b"}
    for obj in (*refl.store.values(), *seen):
        assert "managedFields" not in obj["metadata"]
    assert refl.store["ns/b"] == lean(watched)  # every other field, exactly as sent
    assert seen[0] == lean(listed)
    assert refl.store["ns/a"]["metadata"]["resourceVersion"] == "12"


async def test_bookmark_moves_rv_and_next_watch_starts_there(
    running, server: WatchServer, clock: FakeClock
):
    refl, rec = running
    rec.events.clear()
    server.send("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "57"}})
    await settle()
    assert refl.resource_version == "57"
    assert rec.events == []  # bookmarks are not changes
    await advance(clock, 2)  # a healthy watch …
    server.close()  # … closed by the server (timeoutSeconds)
    await settle()
    assert len(server.watches) == 2
    assert server.watches[1][0]["resourceVersion"] == "57"
    assert server.list_calls == 1  # no relist for a clean close


async def test_gone_error_event_relists_and_synthesizes_deletes(
    running, server: WatchServer, clock: FakeClock
):
    refl, rec = running
    rec.events.clear()
    await advance(clock, 2)
    # while we were away: a deleted, b modified, d added
    server.lists = [
        {"items": [pod("b", "30"), pod("d", "31")], "metadata": {"resourceVersion": "40"}}
    ]
    server.send("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})
    await settle()
    assert server.list_calls == 2
    assert sorted(rec.events) == [
        ("ADDED", "d", None),
        ("DELETED", "a", "1"),
        ("MODIFIED", "b", "2"),
    ]
    assert set(refl.store) == {"ns/b", "ns/d"}
    assert server.watches[-1][0]["resourceVersion"] == "40"
    assert refl.counts["gone"] == 1


async def test_http_410_on_watch_relists(server: WatchServer, clock: FakeClock, running):
    refl, rec = running
    rec.events.clear()
    server.watch_errors = [410]
    await advance(clock, 2)
    server.close()
    await advance(clock, 1)
    assert server.list_calls == 2
    assert refl.counts["gone"] == 1
    assert rec.events == []  # nothing changed, nothing reported


async def test_relist_detects_recreated_object_by_uid(
    running, server: WatchServer, clock: FakeClock
):
    _, rec = running
    rec.events.clear()
    await advance(clock, 2)
    server.lists = [
        {
            "items": [pod("a", "1", uid="new-uid"), pod("b", "2")],
            "metadata": {"resourceVersion": "50"},
        }
    ]
    server.send("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "x"})
    await settle()
    assert rec.events == [("MODIFIED", "a", "1")]


async def test_silent_watch_is_reestablished_after_inactivity(
    running, server: WatchServer, clock: FakeClock
):
    refl, _ = running
    server.send("MODIFIED", pod("a", "21"))
    await advance(clock, 59)
    assert len(server.watches) == 1
    await advance(clock, 2)
    assert refl.counts["inactivity"] == 1
    assert len(server.watches) == 2
    assert server.watches[1][0]["resourceVersion"] == "21"
    assert server.list_calls == 1


async def test_events_keep_watch_alive(running, server: WatchServer, clock: FakeClock):
    refl, _ = running
    for i in range(5):
        await advance(clock, 40)
        server.send("BOOKMARK", {"metadata": {"resourceVersion": str(100 + i)}})
    await settle()
    assert refl.counts["inactivity"] == 0
    assert len(server.watches) == 1


async def test_watch_errors_back_off_with_growing_jittered_delay(
    running, server: WatchServer, clock: FakeClock
):
    refl, _ = running
    server.watch_errors = [500, 500, 500]
    await advance(clock, 2)
    server.close()  # a normal close after a healthy watch; the re-watches then fail
    await settle()
    # failure 1 → ≤0.5 s, 2 → ≤1 s, 3 → ≤2 s (jitter only shortens): ~3.5 s in total
    await advance(clock, 0.3, step=0.1)
    assert refl.counts["errors"] == 1
    assert len(server.watches) == 1
    await advance(clock, 4, step=0.1)
    assert refl.counts["errors"] == 3
    assert len(server.watches) == 2  # back to a working watch
    assert server.list_calls == 1


async def test_handler_exception_does_not_stop_reflector(
    server: WatchServer, clock: FakeClock, loopback: StartApi
):
    client = await make_client(loopback, server, clock, retry=None)
    calls: list[str] = []

    async def bad(etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        calls.append(obj["metadata"]["name"])
        raise RuntimeError("boom")

    refl = Reflector(client, PATH, clock=clock)
    task = asyncio.create_task(refl.run(bad))
    await settle()
    server.send("ADDED", pod("z", "99"))
    await settle()
    assert calls == ["a", "b", "z"]
    assert "ns/z" in refl.store
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


async def test_watch_closed_at_once_repeatedly_backs_off_instead_of_spinning(
    server: WatchServer, clock: FakeClock, loopback: StartApi
):
    class Closing(WatchServer):
        async def handler(self, request: httpx.Request) -> httpx.Response:
            resp = await super().handler(request)
            if request.url.params.get("watch") == "true":
                self.close()
            return resp

    closing = Closing()
    closing.lists = server.lists
    client = await make_client(loopback, closing, clock, retry=None)
    refl = Reflector(client, PATH, clock=clock, rng=random.Random(1))
    task = asyncio.create_task(refl.run(Recorder()))
    await advance(clock, 30, step=0.1)
    # delays 0.5, 1, 2, 4, 8, 16 (jitter shortens by ≤20 %): about 7 watches in 30 s, not thousands
    assert 5 <= len(closing.watches) <= 9
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


async def test_repeated_gone_right_after_list_backs_off(
    running, server: WatchServer, clock: FakeClock
):
    refl, _ = running
    server.watch_errors = [410] * 100
    await advance(clock, 2)
    server.close()
    await advance(clock, 10, step=0.1)
    # backoff 0.5, 1, 2, 4 … between relists instead of a list+watch spin
    assert 3 <= server.list_calls <= 7
    assert refl.counts["gone"] in (server.list_calls - 1, server.list_calls)


def test_cached_objects_share_keys_and_short_strings_and_keep_every_value() -> None:
    def decoded(name: str) -> dict[str, Any]:
        text = json.dumps(
            {
                "metadata": {"name": name, "managedFields": [{"manager": "x"}], "labels": {}},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "message": "m" * 65 + name,
                },
                "spec": {"n": 1, "ok": True, "none": None, "nested": [["a", 1]]},
            }
        )
        return cast(dict[str, Any], json.loads(text))

    a, b = cache_lean(decoded("p-1")), cache_lean(decoded("p-2"))
    assert "managedFields" not in a["metadata"]
    assert a["spec"] == {"n": 1, "ok": True, "none": None, "nested": [["a", 1]]}
    assert a["status"]["message"] == "m" * 65 + "p-1"
    key_a = next(k for k in a["status"]["conditions"][0] if k == "type")
    key_b = next(k for k in b["status"]["conditions"][0] if k == "type")
    assert key_a is key_b  # one "type" for every cached object
    assert a["status"]["conditions"][0]["status"] is b["status"]["conditions"][0]["status"]
    assert a["spec"]["nested"][0][0] is b["spec"]["nested"][0][0]
