"""The ``simulated`` backend: the test double for the core and the benchmark backend.

It runs nothing.  A workload is a record (pod ref, creation time, behaviour read from
annotations) and its state is a pure function of the clock (``TranslatorContext.clock``, as for
every backend), so tests with a fake clock are exact and a benchmark measures vkgate, not a
backend.

Behaviour per pod (annotations):

====================================  =========================================================
``vkgate.io/sim-exit-code``           containers exit with this code after ``sim-run-seconds``
                                      (unset: they run forever)
``vkgate.io/sim-run-seconds``         how long containers run before exiting (default 1)
``vkgate.io/sim-stop-seconds``        how long the backend takes to stop after a delete
                                      (default 0; capped by the grace period)
``vkgate.io/sim-never-stop``          "true": a delete is never confirmed (force-delete tests)
``vkgate.io/sim-fail-create``         a message: create raises ``BackendRejected`` with it
====================================  =========================================================

Settings (``[backend.simulated]``): ``start_delay`` seconds Pending→Running (default 0.5),
``state_file`` (JSON file that keeps workloads across gateway restarts — restart/adoption
tests use it), ``unreachable_file`` (while this path exists every call fails as if the
backend were down), ``cpu``/``memory``/``pods``/``gpus`` capacity, ``notify_interval``.

restartPolicy is honoured: ``Always`` restarts an exiting container (restartCount grows),
``OnFailure`` restarts only non-zero exits, ``Never`` terminates.

What the workload received is kept for inspection (state file, ``extra.containers``): per
container the expanded command/args, env in order and volume files by mount path; secret values
appear as ``<secret:sha256[:12]>``; ``extra.registry_credentials`` lists the imagePullSecret logins
the pod got (server, username, source — never the password); ``extra.duplicate_creates`` counts ``create`` calls for a
UID that already had a workload (idempotent, but a gateway should never need them).  ``status.podIP`` fieldRefs arrive as the placeholder
``__VKGATE_POD_IP__`` (``Features.pod_ip_placeholder``) and are replaced by the workload's IP.
After a delete, containers keep running for ``sim-stop-seconds`` (capped by the grace period),
then the workload disappears.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import hashlib
import heapq
import json
import math
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from translators.base import (
    OWNER_VALUE,
    BackendRejected,
    BackendUnavailable,
    Capacity,
    ContainerState,
    ContainerUsage,
    Features,
    LogOptions,
    NodeInfo,
    NodeUsage,
    Phase,
    PodRef,
    PodUsage,
    ResolvedPod,
    Translator,
    TranslatorContext,
    Vanished,
    WorkloadState,
    cpu_millis,
    parse_quantity,
)
from translators.plugins import BackendSpec
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.settings import Kind, Setting, SettingsError, coerce, report, unknown_keys

ANN = "vkgate.io/"
#: Replaced by the workload's (fake) IP in env values, command and args (status.podIP fieldRefs).
POD_IP_PLACEHOLDER = "__VKGATE_POD_IP__"


@dataclass
class _Record:
    ref: PodRef
    created: float
    containers: list[str]
    init_containers: list[str]
    images: dict[str, str]
    exit_code: int | None
    run_seconds: float
    stop_seconds: float
    never_stop: bool
    restart_policy: str
    node: str
    deleted_at: float | None = None
    grace: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["ref"] = [self.ref.namespace, self.ref.name, self.ref.uid]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> _Record:
        d = dict(d)
        ns, name, uid = d.pop("ref")
        return cls(ref=PodRef(ns, name, uid), **d)


def _ts(t: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).replace(microsecond=0)


def _masked(value: str) -> str:
    """How secret values appear in the state file and logs: never in clear, but comparable."""
    return "<secret:" + hashlib.sha256(value.encode()).hexdigest()[:12] + ">"


def _log_chunks(rec: _Record) -> list[bytes]:
    """A simulated container's log: its command line, then its environment (built when read,
    not kept per pod)."""
    chunks = []
    for name in rec.containers:
        spec = (rec.extra.get("containers") or {}).get(name)
        if spec is None:
            continue
        chunks.append(
            f"{name}: ".encode()
            + " ".join(spec["command"] + spec["args"]).encode()
            + b"\n"
            + b"".join(f"{n}={v}\n".encode() for n, v in spec["env"])
        )
    return chunks


def fake_ip(uid: str) -> str:
    """A stable, never-contacted pod IP derived from the UID (10.88.x.y)."""
    h = hashlib.sha256(uid.encode()).digest()
    return f"10.88.{h[0]}.{max(h[1], 1)}"


class SimulatedTranslator:
    kind = "simulated"
    features = Features(
        volume_kinds=frozenset({"configMap", "secret", "emptyDir", "projected", "downwardAPI"}),
        pod_features=frozenset({"initContainers", "sidecars"}),
        updatable_fields=frozenset(
            {"metadata.labels", "metadata.annotations", "spec.activeDeadlineSeconds"}
        ),
        pod_ip_placeholder=POD_IP_PLACEHOLDER,
    )

    def __init__(self, ctx: TranslatorContext | None = None, **settings: Any) -> None:
        merged: dict[str, Any] = dict(ctx.settings) if ctx else {}
        merged.update(settings)
        self.node_name = ctx.node_name if ctx else str(merged.get("node_name", "vkgate"))
        #: All time: state boundaries on its wall time, notify and follow rounds on its sleep.
        self.clock: Clock = ctx.clock if ctx else SystemClock()
        self.start_delay = float(merged.get("start_delay", 0.5))
        self.state_file = Path(merged["state_file"]) if merged.get("state_file") else None
        self.unreachable_file = (
            Path(merged["unreachable_file"]) if merged.get("unreachable_file") else None
        )
        self.notify_interval = float(merged.get("notify_interval", 0.2))
        #: Tests only: run exec commands as local subprocesses (see the Executor block).
        self.exec_local = str(merged.get("exec_local", "")).lower() in ("1", "true", "yes")
        #: Tests only: per-container usage every running container reports (MetricsSource).
        self.usage_per_container = dict(merged.get("usage") or {})
        self._capacity = Capacity(
            cpu_millis=cpu_millis(merged.get("cpu", "16")),
            memory_bytes=int(parse_quantity(merged.get("memory", "64Gi"))),
            pods=int(merged.get("pods", 500)),
            extended={"nvidia.com/gpu": int(merged["gpus"])} if merged.get("gpus") else {},
        )
        self._records: dict[str, _Record] = {}
        #: UIDs whose deletion is pending (``_gc`` looks only at these, not at every record).
        self._deleting: set[str] = set()
        #: One set per running ``changes()`` stream: UIDs mutated since its last round.
        self._dirty: list[set[str]] = []
        #: uid -> (state, valid from, valid until): see ``_state``.
        self._cached: dict[str, tuple[WorkloadState, float, float]] = {}
        self._closed = asyncio.Event()
        self.calls: dict[str, int] = {"create": 0, "delete": 0, "list": 0}
        self._load()

    # -- persistence -------------------------------------------------------------------

    def _load(self) -> None:
        if self.state_file and self.state_file.exists():
            raw = json.loads(self.state_file.read_text() or "{}")
            self._records = {uid: _Record.from_json(r) for uid, r in raw.items()}
            self._deleting = {u for u, r in self._records.items() if r.deleted_at is not None}

    def _touch(self, uid: str) -> None:
        """A record changed other than by the passing of time: every stream looks at it again."""
        self._cached.pop(uid, None)
        for dirty in self._dirty:
            dirty.add(uid)

    def _save(self) -> None:
        if not self.state_file:
            return
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps({uid: r.to_json() for uid, r in self._records.items()}))
        os.replace(tmp, self.state_file)

    def _check_reachable(self) -> None:
        if self.unreachable_file is not None and self.unreachable_file.exists():
            raise BackendUnavailable(
                f"simulated backend unreachable ({self.unreachable_file} exists)"
            )

    # -- Translator ----------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._closed.set()

    async def ping(self) -> None:
        self._check_reachable()

    async def capacity(self) -> Capacity:
        self._check_reachable()
        return self._capacity

    async def node_info(self) -> NodeInfo:
        return NodeInfo(
            internal_ip="",
            hostname=self.node_name,
            kernel_version="simulated",
            os_image="vkgate simulated backend",
            runtime_version="simulated://0.1",
        )

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        self._check_reachable()
        self.calls["create"] += 1
        existing = self._records.get(pod.uid)
        if existing is not None:
            # Idempotent by UID, but counted: restart tests assert the gateway never re-submits.
            existing.extra["duplicate_creates"] = existing.extra.get("duplicate_creates", 0) + 1
            self._save()
            self._touch(pod.uid)
            return self._state(existing, self._now())
        ann: Mapping[str, str] = pod.pod.get("metadata", {}).get("annotations", {}) or {}
        if ann.get(ANN + "sim-fail-create"):
            raise BackendRejected(ann[ANN + "sim-fail-create"], reason="ProviderFailed")
        exit_code = ann.get(ANN + "sim-exit-code")
        rec = _Record(
            ref=pod.ref,
            created=self._now(),
            containers=[c.name for c in pod.containers],
            init_containers=[c.name for c in pod.init_containers],
            images={c.name: c.image for c in (*pod.init_containers, *pod.containers)},
            exit_code=int(exit_code) if exit_code not in (None, "") else None,
            run_seconds=float(ann.get(ANN + "sim-run-seconds", 1)),
            stop_seconds=float(ann.get(ANN + "sim-stop-seconds", 0)),
            never_stop=str(ann.get(ANN + "sim-never-stop", "")).lower() == "true",
            restart_policy=str(pod.pod.get("spec", {}).get("restartPolicy", "Always")),
            node=self.node_name,
        )
        ip = fake_ip(pod.uid)

        def sub(text: str) -> str:
            # shared: the same env names and values (service links, ...) in every record
            out = text.replace(POD_IP_PLACEHOLDER, ip)
            return sys.intern(out) if len(out) <= 64 else out

        rec.extra["containers"] = {
            c.name: {
                "command": [sub(a) for a in c.command],
                "args": [sub(a) for a in c.args],
                "env": [[e.name, _masked(e.value) if e.secret else sub(e.value)] for e in c.env],
                "files": {
                    f"{m.mount_path}/{f.path}": _masked(f.content.decode("utf-8", "replace"))
                    if f.secret
                    else f.content.decode("utf-8", "replace")
                    for m in c.mounts
                    for v in pod.volumes
                    if v.name == m.volume
                    for f in v.files
                },
            }
            for c in (*pod.init_containers, *pod.containers)
        }
        rec.extra["registry_credentials"] = [
            {"server": c.server, "username": c.username, "source": c.auth_source}
            for c in pod.registry_credentials
        ]
        self._records[pod.uid] = rec
        self._deleting.discard(pod.uid)
        self._touch(pod.uid)
        self._save()
        return self._state(rec, rec.created)

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        self._check_reachable()
        return True

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> WorkloadState | None:
        self._check_reachable()
        self.calls["delete"] += 1
        rec = self._records.get(ref.uid)
        if rec is None:
            return None
        if rec.deleted_at is None:
            rec.deleted_at = self._now()
            rec.grace = float(grace_seconds)
            self._deleting.add(ref.uid)
            self._touch(ref.uid)
            self._save()
        now = self._now()
        stopped = not rec.never_stop and now >= rec.deleted_at + min(rec.stop_seconds, rec.grace)
        final = self._state(rec, now) if stopped else None
        self._gc(now)
        return final  # stopped within the call (sim-stop-seconds 0): gone, here is its end

    async def list(self) -> Sequence[WorkloadState]:
        self._check_reachable()
        self.calls["list"] += 1
        now = self._now()
        self._gc(now)
        return [self._state(r, now) for r in self._records.values()]

    # -- Notifier ------------------------------------------------------------------------

    async def changes(self) -> AsyncIterator[WorkloadState | Vanished]:
        """Every ``notify_interval``, the states that differ from the last one yielded, and
        ``Vanished`` for a yielded workload that is gone (its stop ended: a stopped record is
        removed at once).

        Incremental, so an idle node costs nothing per pod: a state is a pure function of the
        clock between the record's boundaries (``_next_change``), so a round rebuilds only the
        records whose next boundary has passed (a heap of due times) or that were created or
        deleted since (``_touch``).
        """
        last: dict[str, WorkloadState] = {}
        due: list[tuple[float, str]] = []
        dirty: set[str] = set(self._records)
        self._dirty.append(dirty)
        try:
            while not self._closed.is_set():
                try:
                    self._check_reachable()
                except BackendUnavailable:
                    pass
                else:
                    now = self._now()
                    self._gc(now)
                    while due and due[0][0] <= now:
                        dirty.add(heapq.heappop(due)[1])
                    batch = list(dirty)
                    dirty.clear()
                    for uid in batch:
                        rec = self._records.get(uid)
                        if rec is None:
                            if (gone := last.pop(uid, None)) is not None:
                                yield Vanished(gone.ref)
                            continue
                        st = self._state(rec, now)
                        nxt = self._next_change(rec, now)
                        if nxt != math.inf:
                            heapq.heappush(due, (nxt, uid))
                        if last.get(uid) != st:
                            last[uid] = st
                            yield st
                await self._pause()
        finally:
            self._dirty.remove(dirty)

    # -- LogReader -----------------------------------------------------------------------

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        from translators.base import BackendNotFound

        rec = self._records.get(ref.uid)
        if rec is None or container not in rec.containers + rec.init_containers:
            raise BackendNotFound(f"no container {container!r} in pod {ref.key}")
        async for chunk in self._log_stream(ref.uid, container, options):
            yield chunk

    # -- state ---------------------------------------------------------------------------

    def _now(self) -> float:
        """Wall time in epoch seconds, from the clock."""
        return self.clock.now().timestamp()

    async def _pause(self) -> None:
        """One ``notify_interval`` on the clock, cut short by ``close()``."""
        sleep = asyncio.ensure_future(self.clock.sleep(self.notify_interval))
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait((sleep, closed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            closed.cancel()

    def _gc(self, now: float) -> None:
        gone = [
            uid
            for uid in self._deleting
            if (r := self._records.get(uid)) is None
            or (
                r.deleted_at is not None
                and not r.never_stop
                and now >= r.deleted_at + min(r.stop_seconds, r.grace)
            )
        ]
        for uid in gone:
            self._deleting.discard(uid)
            if self._records.pop(uid, None) is not None:
                self._touch(uid)
        if gone:
            self._save()

    def _next_change(self, rec: _Record, now: float) -> float:
        """The first time after ``now`` at which ``_state(rec, ·)`` may differ (inf: never).

        Between these boundaries every field ``_state`` computes is constant: creation, start
        (``start_delay``), the end of the stop time after a delete, and for containers that
        exit the end of each run (``sim-run-seconds``)."""
        start = rec.created + self.start_delay
        points = [rec.created, start]
        if rec.deleted_at is not None and not rec.never_stop:
            points.append(rec.deleted_at + min(rec.stop_seconds, rec.grace))
        if rec.exit_code is not None:
            period = max(rec.run_seconds, 0.001)
            points.append(start + period)
            restarts = rec.restart_policy == "Always" or (
                rec.restart_policy == "OnFailure" and rec.exit_code != 0
            )
            if restarts and now >= start:
                # The same arithmetic as _container; a float tie looks again next round.
                after = start + (int((now - start) // period) + 1) * period
                points.append(after if after > now else math.nextafter(now, math.inf))
        return min((p for p in points if p > now), default=math.inf)

    def _container(self, rec: _Record, name: str, now: float, start: float) -> ContainerState:
        cid = f"simulated://{rec.ref.uid[:8]}/{name}"
        image = rec.images.get(name, "")
        # After a delete the containers keep running for sim-stop-seconds (capped by the grace
        # period), then the record is removed (_gc); sim-never-stop ones never stop.
        stopping = (
            rec.deleted_at is not None
            and not rec.never_stop
            and now >= rec.deleted_at + min(rec.stop_seconds, rec.grace)
        )
        if now < start:
            return ContainerState(
                name=name, state="waiting", reason="ContainerCreating", image=image, container_id=""
            )
        if rec.exit_code is None or (rec.run_seconds <= 0 and rec.exit_code is None):
            if stopping:
                return ContainerState(
                    name=name,
                    state="terminated",
                    reason="Error",
                    exit_code=143,
                    signal=15,
                    started_at=_ts(start),
                    finished_at=_ts(rec.deleted_at or now),
                    image=image,
                    container_id=cid,
                )
            return ContainerState(
                name=name,
                state="running",
                started_at=_ts(start),
                ready=True,
                image=image,
                container_id=cid,
            )
        runs_forever = rec.restart_policy == "Always" or (
            rec.restart_policy == "OnFailure" and rec.exit_code != 0
        )
        period = max(rec.run_seconds, 0.001)
        elapsed = now - start
        if not runs_forever:
            if elapsed < period and not stopping:
                return ContainerState(
                    name=name,
                    state="running",
                    started_at=_ts(start),
                    ready=True,
                    image=image,
                    container_id=cid,
                )
            code = rec.exit_code if elapsed >= period else 143
            return ContainerState(
                name=name,
                state="terminated",
                exit_code=code,
                reason="Completed" if code == 0 else "Error",
                started_at=_ts(start),
                finished_at=_ts(start + min(elapsed, period)),
                image=image,
                container_id=cid,
            )
        restarts = int(elapsed // period)
        last = None
        if restarts:
            last = ContainerState(
                name=name,
                state="terminated",
                exit_code=rec.exit_code,
                reason="Completed" if rec.exit_code == 0 else "Error",
                started_at=_ts(start + (restarts - 1) * period),
                finished_at=_ts(start + restarts * period),
                container_id=cid,
            )
        return ContainerState(
            name=name,
            state="running",
            started_at=_ts(start + restarts * period),
            ready=True,
            restart_count=restarts,
            image=image,
            container_id=cid,
            last_terminated=last,
        )

    def _state(self, rec: _Record, now: float) -> WorkloadState:
        """The record's state at ``now``, built once per stretch between two of its boundaries
        (``_next_change``): a list of 10,000 steady pods reuses 10,000 built states."""
        cached = self._cached.get(rec.ref.uid)
        if cached is not None and cached[1] <= now < cached[2]:
            return cached[0]
        st = self._build_state(rec, now)
        self._cached[rec.ref.uid] = (st, now, self._next_change(rec, now))
        return st

    def _build_state(self, rec: _Record, now: float) -> WorkloadState:
        start = rec.created + self.start_delay
        init = tuple(
            ContainerState(
                name=n,
                state="terminated",
                exit_code=0,
                reason="Completed",
                started_at=_ts(rec.created),
                finished_at=_ts(start),
                image=rec.images.get(n, ""),
                container_id=f"simulated://{rec.ref.uid[:8]}/{n}",
            )
            if now >= start
            else ContainerState(
                name=n, state="waiting", reason="PodInitializing", image=rec.images.get(n, "")
            )
            for n in rec.init_containers
        )
        containers = tuple(self._container(rec, n, now, start) for n in rec.containers)
        if now < start:
            phase = Phase.PENDING
        elif all(c.state == "terminated" for c in containers):
            phase = Phase.SUCCEEDED if all(c.exit_code == 0 for c in containers) else Phase.FAILED
        else:
            phase = Phase.RUNNING
        return WorkloadState(
            ref=rec.ref,
            backend_id=f"sim-{rec.ref.uid}",
            phase=phase,
            placed=now >= rec.created,
            pod_ip=fake_ip(rec.ref.uid) if now >= start else "",
            # an address of the pod's own (never contacted: no port-forward without a tunnel)
            host_network=False,
            started_at=_ts(rec.created),
            containers=containers,
            init_containers=init,
            node_name=rec.node or OWNER_VALUE,
        )

    # -- LogReader options and Executor (kubelet helper) ----------------------------------
    # Logs honour tailLines, sinceTime, timestamps, limitBytes, stream (a simulated container
    # writes only to stdout) and follow (follow ends when the container has terminated or the
    # workload is gone).  Exec runs the command as a LOCAL
    # subprocess, and only with ``exec_local = true`` in [backend.simulated] (tests): a
    # benchmark backend must never run arbitrary commands on the gateway's host.

    async def _log_stream(
        self, uid: str, container: str, options: LogOptions
    ) -> AsyncIterator[bytes]:
        rec = self._records.get(uid)
        created = _ts(rec.created) if rec else self.clock.now()
        lines = [
            line
            for chunk in (_log_chunks(rec) if rec else [])
            if chunk.startswith(container.encode() + b":") and options.stream != "Stderr"
            for line in chunk.splitlines(keepends=True)
        ]
        if options.since is not None and options.since > created:
            lines = []
        if options.tail_lines is not None:
            lines = lines[len(lines) - options.tail_lines :] if options.tail_lines else []
        if options.timestamps:
            stamp = created.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ").encode()
            lines = [stamp + line for line in lines]
        budget = options.limit_bytes
        for line in lines:
            out = line if budget is None else line[:budget]
            if budget is not None:
                budget -= len(out)
            if out:
                yield out
            if budget is not None and budget <= 0:
                return
        while options.follow and (rec := self._records.get(uid)) is not None:
            st = self._state(rec, self._now())
            states = [c for c in (*st.containers, *st.init_containers) if c.name == container]
            if not states or all(c.state == "terminated" for c in states):
                return
            await self._pause()
            if self._closed.is_set():
                return

    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> _LocalExec:
        from translators.base import BackendNotFound, UnsupportedError

        self._check_reachable()
        rec = self._records.get(ref.uid)
        if rec is None or container not in rec.containers + rec.init_containers:
            raise BackendNotFound(f"no container {container!r} in pod {ref.key}")
        if not self.exec_local:
            raise UnsupportedError(
                "exec is disabled in the simulated backend "
                "(set backend.simulated.exec_local = true, for tests only)",
                reason="ExecDisabled",
            )
        if not command:
            raise UnsupportedError("exec needs a command", reason="ExecNoCommand")
        import subprocess

        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if tty else subprocess.PIPE,
            )
        except OSError as exc:
            raise UnsupportedError(
                f"cannot run {command[0]!r}: {exc}", reason="ExecFailed"
            ) from exc
        return _LocalExec(proc)

    async def usage(self) -> NodeUsage:
        """MetricsSource: with ``usage = {cpu = "250m", memory = "64Mi"}`` in
        [backend.simulated], every running container uses that much (CPU time accumulates
        since it started); without it nothing is known and nothing is reported."""
        self._check_reachable()
        now = self._now()
        cores = (
            cpu_millis(self.usage_per_container["cpu"]) / 1000
            if "cpu" in self.usage_per_container
            else None
        )
        memory = (
            int(parse_quantity(self.usage_per_container["memory"]))
            if "memory" in self.usage_per_container
            else None
        )
        pods = []
        for rec in self._records.values():
            st = self._state(rec, now)
            running = [c for c in st.containers if c.state == "running" and c.started_at]
            pods.append(
                PodUsage(
                    ref=rec.ref,
                    started_at=st.started_at,
                    containers=tuple(
                        ContainerUsage(
                            name=c.name,
                            cpu_core_seconds=None
                            if cores is None or c.started_at is None
                            else cores * max(0.0, now - c.started_at.timestamp()),
                            cpu_nano_cores=None if cores is None else int(cores * 1e9),
                            memory_working_set_bytes=memory,
                            started_at=c.started_at,
                        )
                        for c in running
                    ),
                )
            )
        return NodeUsage(time=_dt.datetime.fromtimestamp(now, _dt.UTC), pods=tuple(pods))


class _LocalExec:
    """An ``ExecSession`` over a local subprocess (simulated backend, tests only)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    async def write_stdin(self, data: bytes) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.write(data)
            with contextlib.suppress(ConnectionError):
                await self._proc.stdin.drain()

    async def close_stdin(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()

    async def resize(self, width: int, height: int) -> None:
        return None  # no pty

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()

        async def pump(n: int, stream: asyncio.StreamReader | None) -> None:
            while stream is not None and (data := await stream.read(65536)):
                await queue.put((n, data))
            await queue.put(None)

        tasks = [
            asyncio.create_task(pump(1, self._proc.stdout)),
            asyncio.create_task(pump(2, self._proc.stderr)),
        ]
        ended = 0
        try:
            while ended < len(tasks):
                item = await queue.get()
                if item is None:
                    ended += 1
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()

    async def wait(self) -> int:
        return await self._proc.wait()

    async def cancel(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()


# --------------------------------------------------------------------------- the spec

#: ``[backend.simulated]``: key → (kind, default, lower bound).
_SETTINGS: dict[str, tuple[Kind, Any, float | None]] = {
    "start_delay": ("duration", 0.5, 0),
    "state_file": ("str", "", None),
    "unreachable_file": ("str", "", None),
    "notify_interval": ("duration", 0.2, 0.01),  # 0 would spin
    "exec_local": ("bool", False, None),
    "cpu": ("str", "16", None),
    "memory": ("str", "64Gi", None),
    "pods": ("int", 500, 0),
    "gpus": ("int", 0, 0),
}


def simulated_settings(
    table: Mapping[str, Any], environ: Mapping[str, str] = {}, node_name: str = ""
) -> list[Setting]:
    """``[backend.simulated]`` validated (``usage`` is a free-form table for tests)."""
    unknown_keys("backend.simulated", table, [*_SETTINGS, "usage"])
    values: dict[str, Any] = {}
    for key, (kind, default, lo) in _SETTINGS.items():
        dotted = f"backend.simulated.{key}"
        values[key] = coerce(dotted, kind, table[key], lo=lo) if key in table else default
    for key in ("cpu", "memory"):
        try:
            (cpu_millis if key == "cpu" else parse_quantity)(values[key])
        except ValueError as exc:
            raise SettingsError(f"backend.simulated.{key}", str(exc)) from None
    usage = table.get("usage", {})
    if not isinstance(usage, Mapping):
        raise SettingsError("backend.simulated.usage", f"expected a table, got {usage!r}")
    values["usage"] = dict(usage)
    return report("backend.simulated", values, table=table)


def _factory(ctx: TranslatorContext) -> Translator:
    simulated_settings(ctx.settings)
    return SimulatedTranslator(ctx)


SPEC = BackendSpec(
    kind="simulated",
    factory=_factory,
    settings=simulated_settings,
    features=SimulatedTranslator.features,
)
