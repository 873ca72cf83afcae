"""Scheduling intent of a pod → Nomad job constraints, affinities and priority.

Kubernetes placed the pod on the virtual node; what it asked for *inside* Nomad is carried by
the job (docs/backends/nomad.md, "Scheduling: affinity, spread and priority").  Every field is
either mapped, refused naming the field (``UnsupportedPodFeature``), or — where Kubernetes
already enforced it against the virtual node and Nomad has no cross-job equivalent — named in
the job's ``Meta["vkgate.scheduling-not-forwarded"]``:

=====================================================  ==========================================
nodeSelector                                           constraints, operand ``=`` (key map)
nodeAffinity required, one term with mapped keys       constraints (ANDed expressions)
nodeAffinity required, several terms with mapped keys  refused (Nomad constraints cannot OR)
nodeAffinity preferred                                 ``Affinities``, weight = term weight
                                                       (1..100, inside Nomad's -100..100)
keys outside the key map, ``matchFields``              not forwarded: Kubernetes matched them
                                                       against the virtual node
podAffinity (required or preferred)                    refused: co-location spans jobs, and
                                                       Nomad places one job without the others
podAntiAffinity (required or preferred)                not forwarded (Meta): Kubernetes enforced
                                                       it on the virtual node; ``distinct_hosts``
                                                       and ``spread`` only act within one job
topologySpreadConstraints DoNotSchedule                refused: Nomad ``spread`` is per job
topologySpreadConstraints ScheduleAnyway               not forwarded (Meta): a preference
spec.priority (from priorityClassName)                 Nomad ``Priority`` (``nomad_priority``)
=====================================================  ==========================================

Operators (each expression of a term is one constraint or affinity; Nomad ANDs constraints):
``In`` one value ``=``, several ``set_contains_any`` (comma-joined; label values have no
comma); ``NotIn`` one ``!=`` per value (Nomad's ``!=`` also holds when the attribute is
missing, as ``NotIn`` does); ``Exists`` ``is_set``; ``DoesNotExist`` ``is_not_set``; ``Gt`` /
``Lt`` ``>`` / ``<`` (Nomad 1.6 compares integers numerically).  A preferred term of several
expressions becomes one affinity per expression with the term's weight, so a node that meets
part of the term scores part of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from translators.base import UnsupportedError

META_NOT_FORWARDED = "vkgate.scheduling-not-forwarded"
REASON = "UnsupportedPodFeature"
NODE_AFFINITY = "spec.affinity.nodeAffinity"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
#: PriorityClass values run from -2^31 to 10^9 for user classes (system classes 2*10^9); the
#: mapping is logarithmic so that 1 000, 10^6 and 10^9 land apart (``nomad_priority``).
PRIORITY_DECADES = 9

Target = Callable[[str], "str | None"]


def _expression(expr: Mapping[str, Any], target: str, where: str) -> list[dict[str, str]]:
    op = str(expr.get("operator", ""))
    values = [str(v) for v in expr.get("values") or []]
    if op == "In" and len(values) == 1:
        return [{"LTarget": target, "RTarget": values[0], "Operand": "="}]
    if op == "In" and values:
        return [{"LTarget": target, "RTarget": ",".join(values), "Operand": "set_contains_any"}]
    if op == "NotIn" and values:
        return [{"LTarget": target, "RTarget": v, "Operand": "!="} for v in values]
    if op == "Exists":
        return [{"LTarget": target, "RTarget": "", "Operand": "is_set"}]
    if op == "DoesNotExist":
        return [{"LTarget": target, "RTarget": "", "Operand": "is_not_set"}]
    if op in ("Gt", "Lt") and len(values) == 1:
        return [{"LTarget": target, "RTarget": values[0], "Operand": ">" if op == "Gt" else "<"}]
    raise UnsupportedError(
        f"operator {op!r} with {len(values)} values has no Nomad constraint",
        reason=REASON,
        field=where,
    )


def _term(term: Mapping[str, Any], target: Target, where: str) -> list[dict[str, str]]:
    """The Nomad rules of one nodeSelectorTerm's ``matchExpressions`` on mapped keys."""
    out: list[dict[str, str]] = []
    for i, expr in enumerate(term.get("matchExpressions") or []):
        t = target(str(expr.get("key", "")))
        if t is not None:
            out.extend(_expression(expr, t, f"{where}.matchExpressions[{i}]"))
    return out


def node_affinity(
    spec: Mapping[str, Any], target: Target
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """(constraints, affinities) from ``spec.affinity.nodeAffinity``."""
    na = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    constraints: list[dict[str, str]] = []
    terms = (na.get(REQUIRED) or {}).get("nodeSelectorTerms") or []
    where = f"{NODE_AFFINITY}.{REQUIRED}.nodeSelectorTerms"
    mapped = [r for i, t in enumerate(terms) if (r := _term(t, target, f"{where}[{i}]"))]
    if len(terms) > 1 and mapped:
        raise UnsupportedError(
            f"{len(terms)} nodeSelectorTerms (ORed) of which {len(mapped)} name Nomad node "
            "attributes: Nomad ANDs constraints and cannot express the OR; use one term",
            reason=REASON,
            field=where,
        )
    for rules in mapped:
        constraints.extend(r for r in rules if r not in constraints)
    affinities: list[dict[str, Any]] = []
    for i, pref in enumerate(na.get(PREFERRED) or []):
        weight = int(pref.get("weight", 0))
        at = f"{NODE_AFFINITY}.{PREFERRED}[{i}]"
        if not 1 <= weight <= 100:
            raise UnsupportedError(f"weight {weight} is not 1..100", reason=REASON, field=at)
        for rule in _term(pref.get("preference") or {}, target, f"{at}.preference"):
            affinities.append({**rule, "Weight": weight})
    return constraints, affinities


def not_forwarded(spec: Mapping[str, Any]) -> list[str]:
    """Refuse what has no Nomad meaning; return the fields Kubernetes enforced on the virtual
    node that the job does not carry (for ``META_NOT_FORWARDED``)."""
    affinity = spec.get("affinity") or {}
    if affinity.get("podAffinity"):
        kind = REQUIRED if (affinity["podAffinity"].get(REQUIRED)) else PREFERRED
        raise UnsupportedError(
            "pod affinity places a pod next to other pods, and on Nomad every pod is a job of "
            "its own: no constraint or affinity of one job refers to another job's allocations",
            reason=REASON,
            field=f"spec.affinity.podAffinity.{kind}",
        )
    out: list[str] = []
    anti = affinity.get("podAntiAffinity") or {}
    out.extend(f"spec.affinity.podAntiAffinity.{k}" for k in (REQUIRED, PREFERRED) if anti.get(k))
    for i, tsc in enumerate(spec.get("topologySpreadConstraints") or []):
        where = f"spec.topologySpreadConstraints[{i}]"
        if tsc.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            raise UnsupportedError(
                "whenUnsatisfiable: DoNotSchedule cannot be kept inside Nomad: a Nomad spread "
                "only counts the allocations of its own job, and every pod is a job of its own "
                "(ScheduleAnyway is accepted: Kubernetes scores it on the virtual node)",
                reason=REASON,
                field=where,
            )
        out.append(where)
    return out


def nomad_priority(priority: int | None, *, default: int, maximum: int) -> int:
    """``spec.priority`` → Nomad job priority.  0 or unset: ``default`` (backend.nomad.priority).
    Positive p: ``default`` + ceil((maximum - default) * min(log10 p, 9) / 9), at least one
    step above ``default`` while there is room — so 1 is just above the default and 10^9 and up
    (system classes) reach ``maximum`` (backend.nomad.max_priority).  Negative p mirrors this
    between ``default`` and 1."""
    if not priority:
        return default
    decades = min(math.log10(abs(priority)), PRIORITY_DECADES) / PRIORITY_DECADES
    if priority > 0:
        span = max(maximum - default, 0)
        return default + (max(1, math.ceil(span * decades)) if span else 0)
    span = max(default - 1, 0)
    return default - (max(1, math.ceil(span * decades)) if span else 0)


def merge(first: Sequence[dict[str, str]], more: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    out = list(first)
    out.extend(r for r in more if r not in out)
    return out
