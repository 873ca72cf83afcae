"""Why a job is not placed: Nomad's failed placements → the pod's Pending message.

An unplaced allocation has no state of its own; the scheduler's reasons are in the evaluation
that could not place it (``FailedTGAllocs``).  ``placement_text`` writes one in the words of
``nomad job status``; ``status.workload_state`` shows it as the ``Unschedulable`` message.  It
reaches a view two ways: an Evaluation event on the stream (``views.JobBook.apply_events``), or,
at a resync or a list without the stream, ``blocked_placements``: the blocked evaluations of each
namespace with unplaced jobs, one request per namespace (asking each unplaced job's evaluations
instead cost 0.96 requests per pod in a 5,000-pod burst, since most jobs of a burst wait
unplaced in Nomad's queue at a resync; docs/design/nomad.md, "Change feed at rest").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from translators.base import BackendError
from translators.nomad.client import NomadClient
from translators.nomad.status import JobView

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def placement_text(evaluation: Mapping[str, Any]) -> str:
    """One line from an evaluation's ``FailedTGAllocs`` in the words of ``nomad job status``."""
    failed: Mapping[str, Mapping[str, Any]] = evaluation.get("FailedTGAllocs") or {}
    parts: list[str] = []
    for metric in failed.values():
        if not metric.get("NodesEvaluated"):
            parts.append("No nodes were eligible for evaluation")
        for dc, available in sorted((metric.get("NodesAvailable") or {}).items()):
            if available == 0:
                parts.append(f'No nodes are available in datacenter "{dc}"')
        for cls, num in sorted((metric.get("ClassFiltered") or {}).items()):
            parts.append(f'Class "{cls}": {num} nodes excluded by filter')
        for cs, num in sorted((metric.get("ConstraintFiltered") or {}).items()):
            parts.append(f'Constraint "{cs}": {num} nodes excluded by filter')
        if ne := metric.get("NodesExhausted"):
            parts.append(f"Resources exhausted on {ne} nodes")
        for cls, num in sorted((metric.get("ClassExhausted") or {}).items()):
            parts.append(f'Class "{cls}" exhausted on {num} nodes')
        for dim, num in sorted((metric.get("DimensionExhausted") or {}).items()):
            parts.append(f'Dimension "{dim}" exhausted on {num} nodes')
        for dim in metric.get("QuotaExhausted") or []:
            parts.append(f'Quota limit hit "{dim}"')
    if not parts and failed:
        parts.append("no node could take the allocation")
    return "; ".join(dict.fromkeys(parts))


def placement_from(evaluations: Iterable[Mapping[str, Any]]) -> str:
    """Placement failure text of the newest evaluation that has one ("" when none has)."""
    for ev in sorted(evaluations, key=lambda e: int(e.get("CreateIndex") or 0), reverse=True):
        text = placement_text(ev)
        if text:
            return text
    return ""


async def blocked_placements(client: NomadClient, views: Sequence[JobView]) -> None:
    """Nomad's reasons for the unplaced jobs without a known one, set on their views: the
    blocked evaluations of their namespace, one list per namespace (a blocked evaluation
    carries the ``FailedTGAllocs`` of the placement that failed)."""
    unplaced: dict[tuple[str, str], list[JobView]] = {}
    for view in views:
        if not view.allocs and not view.stop and not view.placement:
            unplaced.setdefault((view.region, view.namespace), []).append(view)
    for (region, namespace), group in unplaced.items():
        try:
            evals = await client.get(
                "/evaluations",
                params={"status": "blocked"},
                namespace=namespace,
                region=region,
            )
        except BackendError as exc:
            log.info("nomad: blocked evaluations of %s: %s", namespace, exc)
            continue
        by_job: dict[str, list[JSON]] = {}
        for ev in evals or []:
            by_job.setdefault(str(ev.get("JobID")), []).append(ev)
        for view in group:
            view.placement = placement_from(by_job.get(view.job_id, [])) or view.placement
