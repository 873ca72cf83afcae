"""The one contract every backend passes: the ``Translator`` Protocol's promises as checks.

``translators.base`` states in docstrings what a translator promises — create is idempotent by
pod UID, a delete of something not found is done, ``delete`` returns the final state or None,
``list`` is one bulk call of this node's workloads, ``start`` survives a down backend, ``ping``
raises ``BackendError`` … — and the gateway relies on each of them.  This module turns every
promise into one *check*: a coroutine function that takes a ``BackendHarness`` and raises
``AssertionError`` naming the broken promise.  A backend — built in or a plugin — is held to
the contract by writing one harness: the checks are the same code for all of them
(docs/backend-authors.md, "The contract suite").

A harness gives the checks a live translator on a backend it controls, pods that backend can
run, and a way to let the backend's time pass.  What a backend lacks is *declared*, never
guessed: its capability Protocols (``capabilities``), whether a restarted translator finds its
workloads (``survives_restart``), whether several nodes share the backend
(``shared_by_nodes``), whether its requests can be counted or it can be made unreachable.  A
check that needs what the harness declares absent raises ``NotApplicable``; the declarations
themselves are checked (``capabilities_are_declared``,
``a_restarted_translator_finds_the_workloads_as_declared``).

No test framework is imported here: a runner turns ``NotApplicable`` into a skip
(tests/contract/common/test_translator_contract.py does, with pytest).
"""

from __future__ import annotations

import datetime as _dt
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Literal, Protocol

from translators.base import (
    Attacher,
    BackendError,
    BackendNotFound,
    BackendRejected,
    Capacity,
    Executor,
    LogOptions,
    LogReader,
    MetricsSource,
    NodeInfo,
    Notifier,
    Phase,
    PodRef,
    PortForwarder,
    ResolvedPod,
    Translator,
    WorkloadState,
)

#: What a harness pod's one container does once it runs: run until stopped, exit 0, exit ≠ 0.
Outcome = Literal["run", "succeed", "fail"]

#: Capability name → the optional Protocol the gateway detects with ``isinstance``.
CAPABILITIES: Mapping[str, type] = {
    "notifier": Notifier,
    "logs": LogReader,
    "exec": Executor,
    "attach": Attacher,
    "port_forward": PortForwarder,
    "metrics": MetricsSource,
}

#: ``settle()`` rounds a check waits at most for a stop or removal to show.
ROUNDS = 5
TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class NotApplicable(Exception):
    """The check needs something the harness declares the backend does not have."""


class BackendHarness(Protocol):
    """One backend under the contract: translators on a backend the harness controls."""

    #: The backend kind (the entry-point name); every translator's ``kind``.
    kind: str
    #: The node ``translator()`` serves unless told otherwise.
    node_name: str
    #: Names from ``CAPABILITIES`` the backend's translator implements.
    capabilities: frozenset[str]
    #: True when a new translator for the same node finds what an earlier one created (the
    #: backend outlives the translator, so a gateway restart adopts its workloads); False
    #: when a translator *is* its backend (workloads kept in its memory).
    survives_restart: bool
    #: True when translators for different nodes use one backend (each lists only its own).
    shared_by_nodes: bool
    #: Bytes the log of a finished ``pod(outcome="succeed")`` container contains.
    log_text: bytes

    async def translator(self, *, node: str = "") -> Translator:
        """A new, started translator for ``node`` (default ``node_name``); the harness closes
        it.  It must start even while the backend is unreachable."""
        ...

    def pod(self, name: str, *, outcome: Outcome = "run", node: str = "") -> ResolvedPod:
        """A new pod (fresh UID, namespace ``default``) with one container that does
        ``outcome``, bound to ``node`` (default ``node_name``)."""
        ...

    async def settle(self) -> None:
        """Let the backend's time pass: created workloads start, exiting ones end, stops and
        removals under way progress (a bounded step, not "until nothing changes")."""
        ...

    def workloads(self, uid: str) -> int:
        """How many workloads carrying pod ``uid`` the backend itself holds (read from the
        backend, not from a translator), stopped ones included until removed."""
        ...

    def requests(self) -> int | None:
        """Requests the backend received so far; None when there is nothing to count."""
        ...

    def unreachable(self) -> AbstractContextManager[None] | None:
        """A context inside which the backend cannot be reached; None when it cannot be made
        so (an in-memory backend)."""
        ...


Check = Callable[[BackendHarness], Awaitable[None]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    """Register ``fn`` as one check of the contract (its name is the check's id)."""
    CHECKS.append(fn)
    return fn


def _expect(condition: bool, promise: str) -> None:
    """Raise ``AssertionError`` naming the promise (kept under ``python -O``)."""
    if not condition:
        raise AssertionError(promise)


def _uids(states: Sequence[WorkloadState]) -> set[str]:
    return {s.ref.uid for s in states}


def _stranger(name: str = "never-created") -> PodRef:
    return PodRef(namespace="default", name=name, uid=str(uuid.uuid4()))


async def _state_of(t: Translator, uid: str) -> WorkloadState | None:
    return next((s for s in await t.list() if s.ref.uid == uid), None)


async def _running(h: BackendHarness, t: Translator, name: str) -> ResolvedPod:
    """A pod whose workload the backend reports Running (and so placed, its container
    running since a known time)."""
    pod = h.pod(name, outcome="run")
    await t.create(pod)
    for _ in range(ROUNDS):
        await h.settle()
        st = await _state_of(t, pod.uid)
        if st is not None and st.phase is Phase.RUNNING:
            _expect(st.placed, f"a Running workload is placed: {st}")
            _expect(
                [(c.name, c.state) for c in st.containers]
                == [(c.name, "running") for c in pod.containers],
                f"a Running workload reports the pod's containers running: {st.containers}",
            )
            _expect(
                all(c.started_at is not None for c in st.containers),
                f"a running container says since when: {st.containers}",
            )
            return pod
    raise AssertionError(f"the harness's pod {name!r} never ran (last state: {st})")


async def _finished(h: BackendHarness, t: Translator, pod: ResolvedPod) -> WorkloadState:
    await t.create(pod)
    for _ in range(ROUNDS):
        await h.settle()
        st = await _state_of(t, pod.uid)
        if st is not None and st.phase in TERMINAL:
            return st
    raise AssertionError(f"pod {pod.name!r} never finished (last state: {st})")


async def _drain(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in stream])


def _terminated(state: WorkloadState) -> bool:
    return state.phase in TERMINAL or all(c.state == "terminated" for c in state.containers)


# --------------------------------------------------------------------------- declarations


@check
async def capabilities_are_declared(h: BackendHarness) -> None:
    """base.py: optional capabilities are Protocols the gateway *detects* with ``isinstance``;
    the harness's declaration says which the backend has, and must match."""
    t = await h.translator()
    _expect(isinstance(t, Translator), "a translator implements the Translator Protocol")
    _expect(t.kind == h.kind, f"the translator's kind is {h.kind!r}, not {t.kind!r}")
    unknown = h.capabilities - set(CAPABILITIES)
    _expect(not unknown, f"capabilities are named from {sorted(CAPABILITIES)}: {unknown}")
    have = {name for name, proto in CAPABILITIES.items() if isinstance(t, proto)}
    _expect(
        have == set(h.capabilities),
        f"declared capabilities {sorted(h.capabilities)} but the translator implements "
        f"{sorted(have)}",
    )


# --------------------------------------------------------------------------- node side


@check
async def ping_passes_while_the_backend_is_up(h: BackendHarness) -> None:
    t = await h.translator()
    await t.ping()


@check
async def a_down_backend_fails_ping_not_start(h: BackendHarness) -> None:
    """``start`` must not fail because the backend is down (ping reports that); ``ping``
    raises ``BackendError``; the calls the gateway makes raise errors of the tree, never a
    client library's own; once the backend is back, ``ping`` passes again."""
    down = h.unreachable()
    if down is None:
        raise NotApplicable(f"the {h.kind} harness cannot make its backend unreachable")
    with down:
        t = await h.translator()
        try:
            await t.ping()
        except BackendError:
            pass
        else:
            raise AssertionError("ping raises BackendError while the backend is down")
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "list": t.list,
            "capacity": t.capacity,
            "create": lambda: t.create(h.pod("while-down")),
            "delete": lambda: t.delete(_stranger(), grace_seconds=0),
        }
        for name, call in calls.items():
            try:
                await call()
            except BackendError:
                continue
            except Exception as exc:
                raise AssertionError(
                    f"{name} raises a BackendError while the backend is down, "
                    f"not {type(exc).__name__}: {exc}"
                ) from exc
            raise AssertionError(f"{name} raises a BackendError while the backend is down")
    await t.ping()


@check
async def capacity_and_node_info_have_their_shapes(h: BackendHarness) -> None:
    t = await h.translator()
    cap = await t.capacity()
    _expect(isinstance(cap, Capacity), "capacity() returns a Capacity")
    for field in ("cpu_millis", "memory_bytes", "pods"):
        value = getattr(cap, field)
        _expect(
            isinstance(value, int) and value >= 0, f"Capacity.{field} is an int >= 0: {value!r}"
        )
    _expect(
        cap.ephemeral_storage_bytes is None
        or (isinstance(cap.ephemeral_storage_bytes, int) and cap.ephemeral_storage_bytes >= 0),
        f"Capacity.ephemeral_storage_bytes is None or an int >= 0: {cap.ephemeral_storage_bytes}",
    )
    _expect(
        all(isinstance(v, int) and v >= 0 for v in cap.extended.values()),
        f"extended resources are ints >= 0: {dict(cap.extended)}",
    )
    info = await t.node_info()
    _expect(isinstance(info, NodeInfo), "node_info() returns a NodeInfo")
    _expect(info.os in ("linux", "windows"), f"NodeInfo.os is linux or windows: {info.os!r}")
    _expect(bool(info.arch), "NodeInfo.arch is set")
    _expect(
        all(isinstance(k, str) and isinstance(v, str) for k, v in info.labels.items()),
        "NodeInfo.labels are strings",
    )


# --------------------------------------------------------------------------- create


@check
async def create_returns_the_pods_workload(h: BackendHarness) -> None:
    t = await h.translator()
    pod = h.pod("created")
    st = await t.create(pod)
    _expect(isinstance(st, WorkloadState), "create returns a WorkloadState")
    _expect(st.ref == pod.ref, f"the state is the pod's: {st.ref} != {pod.ref}")
    _expect(bool(st.backend_id), "the state names its backend workload (backend_id)")
    _expect(st.node_name in ("", h.node_name), f"the workload claims node {st.node_name!r}")
    _expect(h.workloads(pod.uid) == 1, f"one backend workload: {h.workloads(pod.uid)}")


@check
async def create_is_idempotent_by_pod_uid(h: BackendHarness) -> None:
    """base.py: "Idempotent by pod UID: an existing one is returned, not doubled" — right after the
    create, once it runs, and (where the backend survives a restart) from a new translator."""
    t = await h.translator()
    pod = h.pod("twice")
    first = await t.create(pod)
    again = await t.create(pod)
    _expect(h.workloads(pod.uid) == 1, f"a second create doubles nothing: {h.workloads(pod.uid)}")
    _expect(again.ref == pod.ref, "the second create returns the pod's workload")
    _expect(again.backend_id == first.backend_id, "... the same one")
    await h.settle()
    await t.create(pod)
    _expect(h.workloads(pod.uid) == 1, "a create of a running pod doubles nothing")
    if h.survives_restart:
        restarted = await h.translator()
        adopted = await restarted.create(pod)
        _expect(
            h.workloads(pod.uid) == 1,
            f"a restarted translator's create doubles nothing: {h.workloads(pod.uid)}",
        )
        _expect(adopted.backend_id == first.backend_id, "... and returns the existing one")


# --------------------------------------------------------------------------- list


@check
async def list_returns_this_nodes_workloads(h: BackendHarness) -> None:
    """base.py: "All workloads this node owns": each created pod once, each claiming this node (or no
    node: ``WorkloadState.node_name``)."""
    t = await h.translator()
    pods = [h.pod("listed-1"), h.pod("listed-2", outcome="succeed")]
    for pod in pods:
        await t.create(pod)
    states = await t.list()
    uids = [s.ref.uid for s in states]
    _expect(all(uids.count(p.uid) == 1 for p in pods), f"each pod listed once: {uids} vs {pods}")
    for s in states:
        _expect(s.node_name in ("", h.node_name), f"{s.ref.key} claims node {s.node_name!r}")
    await h.settle()
    _expect({p.uid for p in pods} <= _uids(await t.list()), "still listed once they ran")


@check
async def a_restarted_translator_finds_the_workloads_as_declared(h: BackendHarness) -> None:
    """ARCHITECTURE "Identity is the pod UID": listing by the ownership marker is how a
    restarted gateway adopts what it created — where the backend outlives the translator."""
    t = await h.translator()
    pod = h.pod("before-restart")
    await t.create(pod)
    restarted = await h.translator()
    found = pod.uid in _uids(await restarted.list())
    _expect(
        found == h.survives_restart,
        f"survives_restart={h.survives_restart}, but a new translator "
        + ("lists" if found else "does not list")
        + " the earlier one's workload",
    )


@check
async def list_leaves_out_other_nodes_workloads(h: BackendHarness) -> None:
    """Two nodes on one backend each list only their own workloads."""
    if not h.shared_by_nodes:
        raise NotApplicable(f"the {h.kind} harness gives every node a backend of its own")
    other_node = h.node_name + "-other"
    t = await h.translator()
    other = await h.translator(node=other_node)
    mine, theirs = h.pod("mine"), h.pod("theirs", node=other_node)
    await t.create(mine)
    await other.create(theirs)
    await h.settle()
    listed, other_listed = _uids(await t.list()), _uids(await other.list())
    _expect(mine.uid in listed and theirs.uid not in listed, "a node lists only its own pods")
    _expect(theirs.uid in other_listed and mine.uid not in other_listed, "... so does the other")


@check
async def list_is_one_bulk_call(h: BackendHarness) -> None:
    """base.py: "in ONE bulk call": what a list costs the backend does not grow with the workloads."""
    if h.requests() is None:
        raise NotApplicable(f"the {h.kind} harness has no backend requests to count")
    t = await h.translator()
    await _running(h, t, "bulk-0")

    async def cost() -> int:
        await t.list()  # warm: node addresses, caches
        before = h.requests()
        await t.list()
        after = h.requests()
        assert before is not None and after is not None
        return after - before

    one = await cost()
    for i in range(1, 4):
        await t.create(h.pod(f"bulk-{i}"))
    for _ in range(ROUNDS):
        await h.settle()
        if all(s.phase is Phase.RUNNING for s in await t.list()):
            break
    four = await cost()
    _expect(
        four == one,
        f"a list of 4 workloads costs {four} requests, of 1 workload {one}: not one bulk call",
    )


# --------------------------------------------------------------------------- outcome


@check
async def finished_workloads_report_their_outcome(h: BackendHarness) -> None:
    """Exit 0 is Succeeded, exit ≠ 0 Failed, with the container terminated and its code."""
    t = await h.translator()
    ok = await _finished(h, t, h.pod("ok", outcome="succeed"))
    bad = await _finished(h, t, h.pod("bad", outcome="fail"))
    _expect(ok.phase is Phase.SUCCEEDED, f"exit 0 is Succeeded: {ok.phase}")
    _expect(bad.phase is Phase.FAILED, f"exit != 0 is Failed: {bad.phase}")
    names = [c.name for c in h.pod("names").containers]
    for st in (ok, bad):
        _expect([c.name for c in st.containers] == names, f"the pod's containers: {st}")
        _expect(
            all(c.finished_at is not None for c in st.containers),
            f"a terminated container says when it ended: {st.containers}",
        )
    (c_ok,), (c_bad,) = ok.containers, bad.containers
    _expect((c_ok.state, c_ok.exit_code) == ("terminated", 0), f"exit 0 reported: {c_ok}")
    _expect(
        c_bad.state == "terminated" and c_bad.exit_code not in (None, 0),
        f"a non-zero exit reported: {c_bad}",
    )


@check
async def update_of_an_unchanged_pod_is_in_place(h: BackendHarness) -> None:
    """``update`` returns False only when a change needs a re-create: no change needs none."""
    t = await h.translator()
    pod = await _running(h, t, "same")
    st = await _state_of(t, pod.uid)
    assert st is not None
    _expect(await t.update(pod, st) is True, "an unchanged pod updates in place")


# --------------------------------------------------------------------------- delete


@check
async def delete_of_an_unknown_pod_is_done(h: BackendHarness) -> None:
    """base.py: "Not found = done (no error)": no workload, so no final state either."""
    t = await h.translator()
    _expect(
        await t.delete(_stranger(), grace_seconds=30) is None,
        "deleting a pod the backend never had returns None",
    )


async def _delete_and_wait(
    h: BackendHarness, t: Translator, pod: ResolvedPod, grace: int
) -> WorkloadState | None:
    """Delete; check the returned final state (or None) and that the workload stops and is
    removed; a second delete is done."""
    final = await t.delete(pod.ref, grace_seconds=grace)
    if final is not None:
        _expect(final.ref == pod.ref, "the final state is the pod's")
        _expect(_terminated(final), f"a final state has its containers terminated: {final}")
        _expect(
            pod.uid not in _uids(await t.list()), "a workload whose final state came back is gone"
        )
    for _ in range(ROUNDS):
        await h.settle()
        st = await _state_of(t, pod.uid)
        _expect(st is None or _terminated(st), f"after a delete the workload stops: {st}")
        if h.workloads(pod.uid) == 0 and st is None:
            break
    _expect(h.workloads(pod.uid) == 0, f"a deleted workload is removed: {h.workloads(pod.uid)}")
    _expect(pod.uid not in _uids(await t.list()), "a removed workload is not listed")
    _expect(await t.delete(pod.ref, grace_seconds=grace) is None, "deleting it again is done")
    return final


@check
async def delete_returns_the_final_state_or_none(h: BackendHarness) -> None:
    """base.py: "Returns the workload's final state when it stopped within the call (it is gone then)
    …; None when the stop is under way (its end is reported by ``changes()`` or ``list()``)"."""
    t = await h.translator()
    pod = await _running(h, t, "doomed")
    await _delete_and_wait(h, t, pod, grace=30)
    now = await _running(h, t, "doomed-now")
    await _delete_and_wait(h, t, now, grace=0)


@check
async def a_restarted_translator_deletes_by_the_pod_ref_alone(h: BackendHarness) -> None:
    """``PodRef``: the pod's identity is "all a delete/logs/exec needs" — a translator that
    has not listed yet (a gateway that just restarted) still finds the workload."""
    if not h.survives_restart:
        raise NotApplicable(f"an {h.kind} translator is its own backend: nothing to find")
    pod = await _running(h, await h.translator(), "adopted")
    await _delete_and_wait(h, await h.translator(), pod, grace=30)


@check
async def delete_of_a_finished_workload(h: BackendHarness) -> None:
    t = await h.translator()
    pod = h.pod("finished", outcome="succeed")
    await _finished(h, t, pod)
    final = await _delete_and_wait(h, t, pod, grace=30)
    if final is not None:
        _expect(final.phase is Phase.SUCCEEDED, f"a finished workload keeps its end: {final}")


# --------------------------------------------------------------------------- logs


def _logs(h: BackendHarness, t: Translator) -> LogReader:
    if "logs" not in h.capabilities:
        raise NotApplicable(f"the {h.kind} backend declares no logs")
    _expect(isinstance(t, LogReader), "a backend that declares logs is a LogReader")
    assert isinstance(t, LogReader)
    return t


@check
async def logs_of_a_finished_container(h: BackendHarness) -> None:
    t = await h.translator()
    reader = _logs(h, t)
    pod = h.pod("logged", outcome="succeed")
    await _finished(h, t, pod)
    out = await _drain(reader.logs(pod.ref, pod.containers[0].name, LogOptions()))
    _expect(h.log_text in out, f"the container's log holds {h.log_text!r}: {out[:200]!r}")


@check
async def logs_of_an_unknown_pod_or_container_are_not_found(h: BackendHarness) -> None:
    """LogReader: "Raise ``BackendNotFound`` for unknown pod/container"."""
    t = await h.translator()
    reader = _logs(h, t)
    pod = h.pod("known", outcome="succeed")
    await _finished(h, t, pod)
    for ref, container in ((_stranger(), "app"), (pod.ref, "no-such-container")):
        try:
            await _drain(reader.logs(ref, container, LogOptions()))
        except BackendNotFound:
            continue
        raise AssertionError(f"logs of {ref.key}/{container} raise BackendNotFound")


#: A log line with ``timestamps``: an RFC 3339 time, one space, the line.
STAMPED = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) ")
LONG_AGO = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)
FAR_AHEAD = _dt.datetime(2200, 1, 1, tzinfo=_dt.UTC)


def _lines(out: bytes) -> list[bytes]:
    return [line for line in out.split(b"\n") if line]


@check
async def logs_honour_their_options_or_refuse_them(h: BackendHarness) -> None:
    """LogReader: an option the backend cannot honour raises ``BackendRejected`` — it is
    never silently ignored (``kubectl logs --tail 1`` must not print the whole log).  The
    harness's container wrote ``log_text`` to stdout, nothing to stderr."""
    t = await h.translator()
    reader = _logs(h, t)
    pod = h.pod("options", outcome="succeed")
    await _finished(h, t, pod)
    text = h.log_text
    cases: list[tuple[LogOptions, Callable[[bytes], bool], str]] = [
        (LogOptions(tail_lines=0), lambda out: out == b"", "tail_lines=0: no lines"),
        (LogOptions(tail_lines=1), lambda out: len(_lines(out)) <= 1, "tail_lines=1: one line"),
        (LogOptions(limit_bytes=4), lambda out: 0 < len(out) <= 4, "limit_bytes=4: 1-4 bytes"),
        (
            LogOptions(timestamps=True),
            lambda out: text in out and all(STAMPED.match(x) for x in _lines(out)),
            "timestamps: every line starts with its RFC 3339 time",
        ),
        (LogOptions(since=LONG_AGO), lambda out: text in out, "since long ago: every line"),
        (LogOptions(since=FAR_AHEAD), lambda out: text not in out, "since a future time: none"),
        (
            LogOptions(since=LONG_AGO, tail_lines=0),
            lambda out: out == b"",
            "since and tail_lines together: both apply",
        ),
        (LogOptions(stream="Stdout"), lambda out: text in out, "stream Stdout: stdout"),
        (LogOptions(stream="Stderr"), lambda out: text not in out, "stream Stderr: not stdout"),
    ]
    failed = []
    for options, honoured, what in cases:
        try:
            out = await _drain(reader.logs(pod.ref, pod.containers[0].name, options))
        except BackendRejected:
            continue  # refused: the user is told
        if not honoured(out):
            failed.append(f"{what} (got {out[:120]!r})")
    _expect(not failed, "options honoured or refused with BackendRejected: " + "; ".join(failed))


@check
async def exec_into_a_pod_without_workload_is_not_found(h: BackendHarness) -> None:
    """The kubelet API answers 404 for ``BackendNotFound`` (gateway/kubelet/api/routes.py,
    ``backend_http_error``): an Executor says so for a pod it has no workload of."""
    if "exec" not in h.capabilities:
        raise NotApplicable(f"the {h.kind} backend declares no exec")
    t = await h.translator()
    assert isinstance(t, Executor)
    try:
        session = await t.exec(_stranger(), "app", ["true"], tty=False, stdin=False)
    except BackendNotFound:
        return
    await session.cancel()
    raise AssertionError("exec into a pod the backend has no workload of raises BackendNotFound")
