"""The scenario files of tests/golden/decide, loaded: pod + workload + memory + now, and what
the outside answered, as ``decide``'s inputs (``Scenario.plans``: decide, then the plan each
answer gives).  A scenario holds:

* ``row`` — the row of decide's table (gateway/pods/decide_table.toml) it shows, ``why`` — one
  line;
* ``now`` (RFC 3339), ``node`` (overrides of ``Node(name="vk-1", backend="nomad",
  max_retries=3, backoff_max=60)``);
* ``pod`` — its ``metadata`` and ``spec`` are merged over a default pod (``web`` in
  ``default``, uid ``u-1``, one container ``app``, restartPolicy Always), its ``status``
  replaces the default (``phase: Pending``);
* ``workload`` — the backend state as last observed (``WorkloadState`` JSON, plus ``events``:
  [type, reason, message, container]), absent: none;
* ``memory`` — ``PodMemory`` fields; ``applied: {fingerprint, pod}`` is what the workload was
  created from (``pod`` merged over the scenario's pod like above; absent: the pod itself);
* ``outcomes`` — for a plan that ends with a step asking outside (``Create``, ``Submit``,
  ``ResolveUpdate``, ``ApplyUpdate``, ``Stop``, or a failing ``BackendDelete``), what that step
  got, in order; each gives the next plan (``resolution``, ``created``, ``template_error``,
  ``unsupported_error``, ``create_error``, ``update``, ``update_error``, ``stopped``,
  ``delete_error``);
* ``gone`` — instead of a sync, the cleanup of a pod gone from the API: ``{known: bool}``
  (``pod: null`` for an orphan workload).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import yaml

from gateway.pods import decide as dc
from gateway.pods.events import Event
from gateway.pods.keys import GoneKey, PodKey
from gateway.pods.memory import Applied, PodMemory
from gateway.pods.plan import ApplyUpdate, BackendDelete, Create, Plan, ResolveUpdate, Stop, Submit
from gateway.pods.resolution import Resolution, Unsupported
from gateway.pods.translation import Verdict
from translators.base import PodRef, ResolvedPod, WorkloadState
from vkgate_core.kubetypes import Pod

HERE = Path(__file__).parent
SCENARIOS = sorted((HERE / "scenarios").glob("*.yaml"))

DEFAULT_POD: dict[str, Any] = {
    "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
    "spec": {
        "nodeName": "vk-1",
        "restartPolicy": "Always",
        "containers": [{"name": "app", "image": "nginx:1.27"}],
    },
    "status": {"phase": "Pending"},
}


def merged(base: Mapping[str, Any], over: Mapping[str, Any] | None) -> Pod:
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for part in ("metadata", "spec"):
        out[part] = {**out.get(part, {}), **((over or {}).get(part) or {})}
    if over and "status" in over:
        out["status"] = copy.deepcopy(over["status"])
    return cast(Pod, out)


def workload(d: dict[str, Any] | None, pod: Pod) -> WorkloadState | None:
    if d is None:
        return None
    meta = pod["metadata"]
    state = WorkloadState.from_json(d, PodRef(meta["namespace"], meta["name"], meta["uid"]))
    events = tuple((str(t), str(r), str(m), str(c)) for t, r, m, c in d.get("events") or ())
    return dataclasses.replace(state, events=events)


def memory(d: dict[str, Any], pod: Pod) -> PodMemory:
    d = dict(d)
    applied = d.pop("applied", None)
    fields: dict[str, Any] = dict(d)
    if "emitted" in fields:
        fields["emitted"] = tuple(tuple(e) for e in fields["emitted"])
    if "warned_ephemeral" in fields:
        fields["warned_ephemeral"] = frozenset(fields["warned_ephemeral"])
    return PodMemory(
        **fields,
        applied=None
        if applied is None
        else Applied.of(merged(pod, applied.get("pod")), applied.get("fingerprint", "")),
    )


def resolution(d: dict[str, Any]) -> Resolution:
    res = Resolution(
        events=[Event(**e) for e in d.get("events") or []],
        waiting={k: (v[0], v[1]) for k, v in (d.get("waiting") or {}).items()},
        mount_error=d.get("mount_error", ""),
        unsupported=[Unsupported(**u) for u in d.get("unsupported") or []],
        fingerprint=d.get("fingerprint", ""),
    )
    if not res.blocked and d.get("resolved", True):
        res.pod = cast(ResolvedPod, object())  # resolved: decide only asks whether it is
    return res


class Scenario:
    def __init__(self, path: Path, data: dict[str, Any] | None = None) -> None:
        """The scenario file at ``path``, or ``data`` in its words (``path`` names it)."""
        self.path = path
        self.data: dict[str, Any] = yaml.safe_load(path.read_text()) if data is None else data
        d = self.data
        self.now = _dt.datetime.fromisoformat(str(d["now"]).replace("Z", "+00:00"))
        self.node = dc.Node(
            **{"name": "vk-1", "backend": "nomad", "max_retries": 3, "backoff_max": 60.0}
            | (d.get("node") or {})
        )
        self.pod: Pod | None = (
            None if d.get("pod", {}) is None else merged(DEFAULT_POD, d.get("pod"))
        )
        self.observed = workload(d.get("workload"), self.pod) if self.pod else None
        self.memory = memory(d.get("memory") or {}, self.pod) if self.pod else PodMemory()

    def plans(self) -> dict[str, Plan]:
        """``decide`` (or ``gone``), then the plan each outcome gives."""
        d = self.data
        if "gone" in d:
            meta = (self.pod or DEFAULT_POD)["metadata"]
            key = GoneKey(PodKey(f"{meta['namespace']}/{meta['name']}"), str(meta["uid"]))
            plan = dc.gone(key, self.pod, known=bool(d["gone"]["known"]))
            out = {"gone": plan}
        else:
            assert self.pod is not None
            plan = dc.decide(self.pod, self.observed, self.memory, now=self.now, node=self.node)
            out = {"decide": plan}
        for outcome in d.get("outcomes") or []:
            [(kind, value)] = outcome.items()
            plan = self.follow(plan, kind, value or {})
            out[f"after {kind}"] = plan
        return out

    def follow(self, plan: Plan, kind: str, value: dict[str, Any]) -> Plan:
        pod, node, mem = self.pod, self.node, self.memory
        assert pod is not None and plan, f"{self.path.name}: no plan to follow with {kind}"
        last = plan[-1]
        if kind == "delete_error":
            assert any(isinstance(s, BackendDelete | Stop) for s in plan), kind
            return dc.delete_failed(pod, value["message"], node=node)
        if kind == "resolution" and isinstance(last, Create):
            return dc.resolved(pod, resolution(value), node=node)
        if kind == "resolution" and isinstance(last, ResolveUpdate):
            assert self.observed is not None
            return dc.update_resolved(pod, self.observed, mem, resolution(value))
        if kind in ("update", "update_error"):
            assert isinstance(last, ApplyUpdate) and self.observed is not None, kind
            if kind == "update_error":
                return dc.update_failed(value["message"], node=node)
            return dc.updated(pod, self.observed, mem, last, bool(value["in_place"]), node=node)
        if kind == "stopped":
            assert isinstance(last, Stop), kind
            final = workload(value.get("workload"), pod)
            return dc.stopped(pod, final, now=self.now, grace=last.grace)
        assert isinstance(last, Submit), f"{self.path.name}: {kind} after {last}"
        if kind == "created":
            state = workload(value["workload"], pod)
            assert state is not None
            current = {"same": pod, "gone": None}.get(value.get("current", "same"), pod)
            if value.get("current") == "replaced":
                current = merged(pod, {"metadata": {"uid": "u-2"}})
            return dc.created(pod, state, current, node=node)
        if kind == "template_error":
            verdict = Verdict(float(value["delay"]), bool(value.get("record_event", True)))
            return dc.template_failed(pod, f"template {value['message']}", verdict)
        if kind == "unsupported_error":
            return dc.create_refused(pod, value["reason"], value["message"])
        assert kind == "create_error", kind
        failure = dc.BackendFailure(
            message=value["message"],
            retryable=value.get("retryable", True),
            forbidden=value.get("forbidden", False),
            retry_after=value.get("retry_after"),
        )
        return dc.create_failed(pod, failure, mem, node=node)
