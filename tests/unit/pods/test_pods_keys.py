"""The work queue's typed keys (gateway/pods/keys.py): a pod sync and the cleanup of a gone
pod's workload are different keys for the same ``ns/name``, and the queue keeps their types."""

from __future__ import annotations

import random

from gateway.pods.keys import GoneKey, PodKey
from gateway.pods.queue import WorkQueue
from vkgate_core.clock import FakeClock


def test_pod_key_is_the_cache_key() -> None:
    key = PodKey.of({"metadata": {"namespace": "team-a", "name": "web"}})
    assert key == "team-a/web" and hash(key) == hash("team-a/web")
    assert (key.namespace, key.name) == ("team-a", "web")
    assert {"team-a/web": 1}[key] == 1  # looks up the reflector's plain-string keys


def test_gone_key_names_the_pod_and_its_uid() -> None:
    gone = GoneKey(PodKey("team-a/web"), "u-1")
    assert str(gone) == "team-a/web/u-1"
    assert gone != PodKey("team-a/web") and gone != "team-a/web/u-1"


async def test_queue_holds_a_sync_and_a_cleanup_of_one_pod_apart_and_keeps_their_types() -> None:
    q: WorkQueue[PodKey | GoneKey] = WorkQueue(clock=FakeClock(), rng=random.Random(1))
    pod = PodKey("team-a/web")
    q.add(pod)
    q.add(GoneKey(pod, "old-uid"))
    q.add(GoneKey(pod, "older-uid"))
    assert len(q) == 3
    got = [await q.get() for _ in range(3)]
    assert [type(k) for k in got] == [PodKey, GoneKey, GoneKey]
    assert {k.uid for k in got if isinstance(k, GoneKey)} == {"old-uid", "older-uid"}
