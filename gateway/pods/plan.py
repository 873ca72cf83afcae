"""What one pod sync should do, as data: ``decide`` returns a ``Plan``, ``act`` executes it.

A plan is a tuple of steps, executed in order.  Most steps only do something (record an Event,
write a status, delete the pod); a few have an *outcome* that decides what follows — the
resolution of ``Create``, the backend's answer to ``Submit``, ``ApplyUpdate`` and ``Stop``.
Such a step is always the last of its plan: ``act`` hands its outcome to the matching pure
function of ``gateway.pods.decide`` and runs the plan that returns (docs/design/pod-sync.md).
A plan ends the sync with ``Retry`` (a failure: back off, or come back ``after`` seconds),
``Defer`` (not a failure: come back later) or, when it simply runs out, "done".

``WriteStatus`` names the *source* of a status (``FromWorkload``, ``NotCreated``, …), not the
status itself: the status manager (``gateway.pods.status.manager``) renders it with everything
else it knows at write time (restart counts carried over a re-created workload, container
readiness) through ``gateway.pods.status.rules``.

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.pods.events import Event
from translators.base import WorkloadState

# --------------------------------------------------------------------------- status sources


@dataclass(frozen=True)
class FromWorkload:
    """The status of a workload the backend reports (``status.from_workload``)."""

    state: WorkloadState


@dataclass(frozen=True)
class NotCreated:
    """Pending, nothing running (``status.pending``); ``waiting``: container → (reason, message)."""

    reason: str = ""
    message: str = ""
    waiting: Mapping[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejected:
    """Failed before anything ran: the pod can never run here (``status.rejected``)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Ended:
    """Failed, containers terminated 137: the workload was lost, or the pod ended for ``reason``
    (``status.lost``)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Deleted:
    """Terminal status of a pod being deleted whose workload stopped, or is gone (None)."""

    state: WorkloadState | None


@dataclass(frozen=True)
class DeleteFailed:
    """The current status with ``reason: ProviderDeleteFailed`` and ``message``; nothing for a
    terminal pod."""

    message: str


StatusSource = FromWorkload | NotCreated | Rejected | Ended | Deleted | DeleteFailed

# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Log:
    """A line in vkgate's log (``level``: ``info`` or ``warning``)."""

    level: Literal["info", "warning"]
    message: str


@dataclass(frozen=True)
class Count:
    """Add one to a pod sync counter (``vkgate_pod_sync_operations_total``)."""

    name: str


@dataclass(frozen=True)
class WriteStatus:
    """Hand a status to the status manager.  ``first``: the first status of a workload just
    created (the status manager may hold it back, docs/design/kubelet-contract.md, "Status
    writes"); ``latest``: write it onto the cache's newest version of the pod (same uid), not
    the one this sync started from — nothing when it is gone or replaced."""

    source: StatusSource
    first: bool = False
    latest: bool = False


@dataclass(frozen=True)
class Requeue:
    """Sync the pod again after ``after`` seconds; the plan goes on."""

    after: float


@dataclass(frozen=True)
class Create:
    """Resolve the pod (env, volumes, references).  Outcome: the ``Resolution``
    (→ ``decide.resolved``)."""


@dataclass(frozen=True)
class Submit:
    """Render and create the workload.  Outcome: its state (→ ``decide.created``) or the
    error (→ ``decide.template_failed``, ``create_refused``, ``create_failed``)."""


@dataclass(frozen=True)
class ForgetSubmission:
    """The workload vanished soon after it was submitted: forget the submission (a create
    follows)."""


@dataclass(frozen=True)
class Recreate:
    """The backend lost the workload of a pod that must keep running: carry each container's
    restart count over (one more restart), forget workload and submission (a create follows)."""


@dataclass(frozen=True)
class NoteApplied:
    """Remember the pod's spec as applied to its workload, with this resolution fingerprint."""

    fingerprint: str


@dataclass(frozen=True)
class NoteEmitted:
    """Remember the backend events already recorded as Events."""

    events: tuple[tuple[str, str, str, str], ...]


@dataclass(frozen=True)
class NoteWarned:
    """Remember the ephemeral containers already warned about."""

    names: frozenset[str]


@dataclass(frozen=True)
class ResolveUpdate:
    """Resolve the running pod again.  Outcome: the ``Resolution`` (→ ``decide.update_resolved``)."""


@dataclass(frozen=True)
class ApplyUpdate:
    """Apply the changed ``fields`` to the running workload.  Outcome: in place or not
    (→ ``decide.updated``)."""

    fields: tuple[str, ...]
    fingerprint: str


@dataclass(frozen=True)
class Stop:
    """Ask the backend to stop the workload within ``grace`` seconds.  Outcome: its final state
    when it stopped within the call, else None (→ ``decide.stopped``)."""

    grace: int


@dataclass(frozen=True)
class RunPreStop:
    """Start the preStop hooks of the pod's running containers, each bounded by ``grace``
    seconds (``gateway.probes.hooks``); they queue the pod when done.  The plan goes on."""

    grace: float


@dataclass(frozen=True)
class BackendDelete:
    """Delete the workload in the backend (not-found is done)."""

    grace: int


@dataclass(frozen=True)
class WorkloadGone:
    """The backend no longer has the workload: forget it (a cleanup then sends no second
    delete)."""


@dataclass(frozen=True)
class FinalDelete:
    """``DELETE pods/<name>`` with grace 0 and the uid as precondition."""


@dataclass(frozen=True)
class Forget:
    """The pod is gone from the API and its workload deleted: forget everything about it."""


@dataclass(frozen=True)
class Retry:
    """End the sync as failed: come back after ``after`` seconds, or with the key's backoff
    (at least ``retry_after``) when ``after`` is None."""

    after: float | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class Defer:
    """End the sync, not as a failure: come back after ``after`` seconds."""

    after: float


Step = (
    Event
    | Log
    | Count
    | WriteStatus
    | Requeue
    | Create
    | Submit
    | ForgetSubmission
    | Recreate
    | NoteApplied
    | NoteEmitted
    | NoteWarned
    | ResolveUpdate
    | ApplyUpdate
    | Stop
    | RunPreStop
    | BackendDelete
    | WorkloadGone
    | FinalDelete
    | Forget
    | Retry
    | Defer
)
Plan = tuple[Step, ...]


@dataclass(frozen=True)
class Done:
    """The sync finished: no retry (the key's backoff starts over)."""


DONE = Done()
#: How a pod sync ended, for the worker: done, retry (a failure) or defer.
Outcome = Done | Retry | Defer


# --------------------------------------------------------------------------- as data


def describe(plan: Plan) -> list[Any]:
    """The plan as plain data (golden files, debug logs): a step without fields is its name,
    else ``{name: {field: value}}`` with default-valued fields left out; a ``WorkloadState``
    is ``"<backend id> (<phase>)"``."""
    return [_value(step) for step in plan]


def _value(value: Any) -> Any:
    if isinstance(value, WorkloadState):
        return f"{value.backend_id} ({value.phase})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: _value(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not _is_default(f, getattr(value, f.name))
        }
        name = type(value).__name__
        return {name: fields} if fields else name
    if isinstance(value, Mapping):
        return {str(k): _value(v) for k, v in sorted(value.items())}
    if isinstance(value, frozenset | set):
        return sorted(_value(v) for v in value)
    if isinstance(value, tuple | list):
        return [_value(v) for v in value]
    return value


def _is_default(f: dataclasses.Field[Any], value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        return bool(value == f.default)
    if f.default_factory is not dataclasses.MISSING:
        return bool(value == f.default_factory())
    return False
