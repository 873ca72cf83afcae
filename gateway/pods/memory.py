"""What a node remembers about its pods between syncs: a few tables, each with one owner.

The pod cache (the reflector's store) says what Kubernetes wants; these tables say what vkgate
knows and did.  Each table is private to one class below and changed only through its methods,
so every write has one place (docs/design/pod-sync.md, "Who owns what"):

=====================  =========================================  ============================
table                  what                                       changed by
=====================  =========================================  ============================
``BackendView``        pod uid → the workload's latest state      the controller (backend list,
                                                                  change stream); ``act`` for
                                                                  the backend's own answers
                                                                  (create, a delete that ended
                                                                  it)
``ActMemory``          submissions (when, what was applied),      ``act`` only
                       stops asked for, final deletes sent,
                       backend events and warnings recorded,
                       the reference changes already applied
``RefVersions``        pod uid → how often its referenced         the controller only
                       ConfigMaps/Secrets changed
=====================  =========================================  ============================

The status manager keeps its own (echo memory, write counters, restart counts carried over a
re-created workload, container readiness); the controller keeps the last object of each pod
gone from the API.  ``decide`` reads one pod's share of these as a ``PodMemory`` snapshot and
never writes.

The helpers here fingerprint a pod's spec: ``spec_hash`` and the ``snapshot`` of what was
applied, compared without hashing while the cache shares unchanged parts (``same_objects``).

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from translators.base import PodRef, WorkloadState
from vkgate_core.kubetypes import Pod, as_pod

BackendEvents = tuple[tuple[str, str, str, str], ...]


def uid_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def pod_ref(pod: Pod) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(
        str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
    )


def spec_hash(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    body = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "spec": {k: v for k, v in (pod.get("spec") or {}).items() if k != "ephemeralContainers"},
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def snapshot(pod: Pod) -> Pod:
    """What ``changed_fields`` compares of a submitted pod: labels, annotations and spec.

    Kept per pod for as long as it runs, so it holds only these (the cache shares them with
    the current version while they are unchanged, docs/design/kube-client.md, "Cache"), not
    the whole pod of the time with its status."""
    meta = pod.get("metadata") or {}
    return as_pod(
        {
            "metadata": {"labels": meta.get("labels"), "annotations": meta.get("annotations")},
            "spec": pod.get("spec"),
        }
    )


def same_objects(snap: Pod, pod: Pod) -> bool:
    """True when ``pod`` has the very spec, labels and annotations objects of ``snap``."""
    meta, snap_meta = pod.get("metadata") or {}, snap.get("metadata") or {}
    return (
        snap.get("spec") is pod.get("spec")
        and snap_meta.get("labels") is meta.get("labels")
        and snap_meta.get("annotations") is meta.get("annotations")
    )


def changed_fields(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    if old is None:
        return ["the pod spec"]
    out = []
    for part in ("labels", "annotations"):
        if (old.get("metadata") or {}).get(part) != (new.get("metadata") or {}).get(part):
            out.append(f"metadata.{part}")
    a, b = old.get("spec") or {}, new.get("spec") or {}
    for k in sorted(set(a) | set(b)):
        if k != "ephemeralContainers" and a.get(k) != b.get(k):
            out.append(f"spec.{k}")
    return out


@dataclass(frozen=True, slots=True)
class Applied:
    """What the workload was created (or last updated) from."""

    #: ``spec_hash`` of the pod.
    spec: str
    #: ``snapshot`` of the pod.
    snapshot: Pod
    #: ``Resolution.fingerprint`` (env values, files); "" when adopted.
    fingerprint: str

    @classmethod
    def of(cls, pod: Pod, fingerprint: str) -> Applied:
        return cls(spec_hash(pod), snapshot(pod), fingerprint)


@dataclass(frozen=True, slots=True)
class PodMemory:
    """One pod's share of the tables, as ``decide`` reads it (a snapshot; decide never writes)."""

    #: This process submitted the workload (or adopted it at start-up).
    submitted: bool = False
    #: Seconds since then (``inf`` when not submitted).
    submitted_age: float = math.inf
    applied: Applied | None = None
    #: A referenced ConfigMap/Secret changed since the last create or update.
    refs_changed: bool = False
    #: The grace period the backend was asked to stop the workload with.
    delete_requested: int | None = None
    emitted: BackendEvents = ()
    warned_ephemeral: frozenset[str] = frozenset()
    #: Seconds before a pod that failed to translate may be rendered again
    #: (``TranslationRetries.hold``); None: render now.
    translation_wait: float | None = None
    #: This attempt's number (1 + the key's failures so far).
    attempt: int = 1
    #: The pod's preStop hooks on deletion: ``""`` not started, ``running``, ``done``
    #: (``gateway.probes.hookspec.PreStop``, owned by ``Hooks``).
    pre_stop: str = ""


class BackendView:
    """Pod uid → the latest state of its workload, as far as this node knows.

    Like the pod cache, it is filled by watching the backend: the controller's one list per
    interval, the change stream and the start-up list (``observe``, ``vanish``).  Unlike it,
    the backend's answers to our own requests are written through at once (``answered``,
    ``removed``, called by ``act``), so the next sync sees the workload it just created without
    waiting for a list.  ``refresh_soon`` asks the controller for an early list (a stop that
    has not finished yet)."""

    def __init__(self) -> None:
        self._states: dict[str, WorkloadState] = {}
        #: Set when a list is wanted before the next interval; the reconcile loop clears it.
        self.refresh = asyncio.Event()

    def get(self, uid: str) -> WorkloadState | None:
        return self._states.get(uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._states

    def __len__(self) -> int:
        return len(self._states)

    # -- the controller: what the backend lists and streams

    def observe(self, state: WorkloadState) -> bool:
        """The backend reports ``state``; True when it differs from what was known."""
        uid = state.ref.uid
        if self._states.get(uid) == state:
            return False
        self._states[uid] = state
        return True

    def vanish(self, uid: str) -> None:
        """The backend's list no longer has the workload."""
        self._states.pop(uid, None)

    # -- act: the backend's answers to our requests

    def answered(self, state: WorkloadState) -> None:
        """The backend answered a create with ``state``."""
        self._states[state.ref.uid] = state

    def removed(self, uid: str) -> None:
        """The workload is gone: stopped and deleted, or lost and about to be re-created."""
        self._states.pop(uid, None)

    def refresh_soon(self) -> None:
        self.refresh.set()

    def forget(self, uid: str) -> None:
        self._states.pop(uid, None)


class ActMemory:
    """What ``act`` did per pod uid; only ``act`` (``gateway.pods.act.PodActor``) writes it."""

    def __init__(self) -> None:
        #: uid → monotonic time this process submitted (or adopted) the workload.
        self._submitted: dict[str, float] = {}
        #: uid → what the workload was created or last updated from.
        self._applied: dict[str, Applied] = {}
        #: uid → grace period the backend was asked to stop the workload with.
        self._delete_requested: dict[str, int] = {}
        #: uids whose final delete was sent (until the pod's cleanup): the kubelet API's running
        #: pods leave them out even while the cache still holds the pod.
        self._finished: set[str] = set()
        #: uid → backend events already recorded as Events.
        self._emitted: dict[str, BackendEvents] = {}
        #: uid → ephemeral containers already warned about.
        self._warned: dict[str, frozenset[str]] = {}
        #: uid → the ``RefVersions`` version its last create or update applied.
        self._refs_seen: dict[str, int] = {}
        #: act's sync counters (``vkgate_pod_sync_operations_total``).
        self.stats: Counter[str] = Counter()

    # -- reading

    def view(
        self,
        uid: str,
        *,
        now: float,
        refs_version: int,
        translation_wait: float | None,
        attempt: int,
        pre_stop: str = "",
    ) -> PodMemory:
        at = self._submitted.get(uid)
        return PodMemory(
            submitted=at is not None,
            submitted_age=math.inf if at is None else now - at,
            applied=self._applied.get(uid),
            refs_changed=refs_version != self._refs_seen.get(uid, 0),
            delete_requested=self._delete_requested.get(uid),
            emitted=self._emitted.get(uid, ()),
            warned_ephemeral=self._warned.get(uid, frozenset()),
            translation_wait=translation_wait,
            attempt=attempt,
            pre_stop=pre_stop,
        )

    def is_submitted(self, uid: str) -> bool:
        return uid in self._submitted

    def submitted_since(self, uid: str, since: float) -> bool:
        t = self._submitted.get(uid)
        return t is not None and t >= since

    def finished(self, uid: str) -> bool:
        return uid in self._finished

    def stopping(self) -> bool:
        """Some pod waits for its workload to stop."""
        return bool(self._delete_requested)

    # -- writing (act)

    def submitted(self, uid: str, *, at: float, applied: Applied) -> None:
        self._submitted[uid] = at
        self._applied[uid] = applied

    def forget_submission(self, uid: str) -> None:
        self._submitted.pop(uid, None)
        self._applied.pop(uid, None)

    def workload_gone(self, uid: str) -> None:
        self._submitted.pop(uid, None)

    def note_applied(self, uid: str, applied: Applied) -> None:
        self._applied[uid] = applied

    def note_refs(self, uid: str, version: int) -> None:
        self._refs_seen[uid] = version

    def note_emitted(self, uid: str, events: BackendEvents) -> None:
        self._emitted[uid] = events

    def note_warned(self, uid: str, names: frozenset[str]) -> None:
        self._warned[uid] = self._warned.get(uid, frozenset()) | names

    def delete_requested(self, uid: str, grace: int) -> None:
        self._delete_requested[uid] = grace

    def final_delete_sent(self, uid: str) -> None:
        self._finished.add(uid)

    def forget(self, uid: str) -> None:
        for table in (
            self._submitted,
            self._applied,
            self._delete_requested,
            self._emitted,
            self._warned,
            self._refs_seen,
        ):
            table.pop(uid, None)
        self._finished.discard(uid)


class RefVersions:
    """Pod uid → how many times its referenced ConfigMaps/Secrets changed; only the controller
    writes it (``changed``, when the reference cache reports a change, and ``forget``).  A pod's
    references changed since its last create or update while this is ahead of what ``act``
    applied (``ActMemory``)."""

    def __init__(self) -> None:
        self._versions: dict[str, int] = {}

    def version(self, uid: str) -> int:
        return self._versions.get(uid, 0)

    def changed(self, uid: str) -> None:
        self._versions[uid] = self._versions.get(uid, 0) + 1

    def forget(self, uid: str) -> None:
        self._versions.pop(uid, None)
