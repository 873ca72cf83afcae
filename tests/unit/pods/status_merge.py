"""The API server's strategic merge of a pod status patch, for tests: applies what
``gateway.pods.status.rules.status_patch`` produced to the fakes' stored pods (production code only
sends patches; it never applies them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.pods.status.rules import MERGE_KEYS, normalize

JSON = dict[str, Any]


def apply_patch(old: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON:
    """Apply a ``status_patch`` result; mirrors the API server's strategic merge for the
    keys ``status_patch`` uses."""
    out: JSON = {k: v for k, v in normalize(old).items()}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            continue
        if v is None:
            out.pop(k, None)
        elif k in MERGE_KEYS and isinstance(v, list):
            key = MERGE_KEYS[k]
            order = [i[key] for i in patch.get(f"$setElementOrder/{k}", [])] or None
            cur = {i.get(key): dict(i) for i in out.get(k) or []}
            for item in v:
                if item.get("$patch") == "delete":
                    cur.pop(item.get(key), None)
                elif item.get(key) in cur:
                    cur[item.get(key)] = _merge(cur[item.get(key)], item)
                else:
                    cur[item.get(key)] = {x: y for x, y in item.items() if y is not None}
            keys = order or list(cur)
            rest = [x for x in cur if x not in keys]
            out[k] = [cur[x] for x in [*keys, *rest] if x in cur]
        elif isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return normalize(out)  # type: ignore[no-any-return]


def _merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON:
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out
