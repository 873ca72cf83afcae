"""The pod work queue's keys, typed: the worker dispatches on the key's type.

* ``PodKey`` — ``ns/name``: sync the newest object of this pod from the cache.  It *is* the
  string the pod cache (``Reflector.store``), the reference tracker and the status bookkeeping
  are keyed by (a ``str`` subclass: no conversion on the hot path, equal to the plain string).
* ``GoneKey`` — a pod that is gone from the API (deleted, or replaced under the same name by a
  pod with another uid): remove the workload of ``uid``.  Two keys, because a pod ``ns/name``
  and the leftover of its predecessor must be worked on independently.

docs/design/kubelet-contract.md, "Pod watch and work queue".

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class PodKey(str):
    """``ns/name`` of a pod."""

    __slots__ = ()

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodKey:
        meta = pod.get("metadata") or {}
        return cls(f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    @property
    def namespace(self) -> str:
        return self.partition("/")[0]

    @property
    def name(self) -> str:
        return self.partition("/")[2]


class GoneKey(NamedTuple):
    """The workload of pod ``pod`` with ``uid``, whose object is gone from the API."""

    pod: PodKey
    uid: str

    def __str__(self) -> str:
        return f"{self.pod}/{self.uid}"


QueueKey = PodKey | GoneKey
