"""Rendered text → data, bounded: the last step of a render before a backend sees the spec.

A template's *text* is bounded by ``RenderLimits.max_output``, but its *data* need not be: YAML
aliases let a few hundred bytes stand for a billion nodes ("billion laughs"), and nesting
brackets deeper than Python's recursion limit breaks the parsers themselves.  PyYAML shares
aliased nodes, so the damage comes later, when the spec is validated or serialised for the
backend (exponential time and memory, on the event loop).  So the parsed value is measured
*before* anything walks it the naive way: its expanded size (the characters its JSON form would
have) and its depth, with aliased objects measured once (memoised by identity) and alias cycles
refused.  Any failure is a ``TranslationError``; docs/design/template-safety.md has the numbers.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from translators.base import TranslationError

__all__ = ["parse_output"]


class _TooBig(Exception):
    """Measuring stopped: ``reason`` is "size", "depth" or "cycle"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses to nest deeper than ``max_depth`` while composing, so a
    ``[[[[…`` bomb stops at the bound instead of at the recursion limit (PyYAML's composer
    recurses per level, and its scanner is lazy: stopping early also stops scanning)."""

    max_depth = 64
    _level = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._level += 1
        try:
            if self._level > self.max_depth:
                raise _TooBig("depth")
            return super().compose_node(parent, index)
        finally:
            self._level -= 1


def parse_output(
    template: str, text: str, *, max_size: int, max_depth: int, max_nodes: int | None = None
) -> Any:
    """JSON (or YAML for ``*.yaml.j2``/``*.yml.j2``) → data no larger than ``max_size``
    characters once expanded, no deeper than ``max_depth`` and of at most ``max_nodes`` values
    (objects, lists and scalars as parsed: an alias is one); errors name the output line."""
    try:
        if template.endswith((".yaml.j2", ".yml.j2")):
            value = _load_yaml(template, text, max_depth)
        else:
            value = _load_json(template, text)
        measure(value, max_size=max_size, max_depth=max_depth, max_nodes=max_nodes)
    except RecursionError:
        raise TranslationError(_MESSAGES["depth"].format(max_depth), template=template) from None
    except _TooBig as exc:
        bound = {"size": max_size, "depth": max_depth, "nodes": max_nodes}.get(exc.reason)
        raise TranslationError(_MESSAGES[exc.reason].format(bound), template=template) from None
    return value


_MESSAGES = {
    "size": "output expands to more than {} characters (YAML aliases?)",
    "depth": "output nests deeper than {} levels",
    "cycle": "output refers to itself (a YAML alias inside its own anchor)",
    "nodes": "output has more than {} values (objects, lists and scalars)",
}


def _load_yaml(template: str, text: str, max_depth: int) -> Any:
    loader = _BoundedLoader(text)
    loader.max_depth = max_depth
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (output line {mark.line + 1})" if mark is not None else ""
        raise TranslationError(
            f"output is not valid YAML{where}: {exc}", template=template
        ) from exc


def _load_json(template: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        bad = lines[exc.lineno - 1].strip() if 0 < exc.lineno <= len(lines) else ""
        if len(bad) > 120:  # a cut ends with "…": translators/render/masking.py masks there
            bad = bad[:119] + "…"
        raise TranslationError(
            f"output is not valid JSON: {exc.msg} at output line {exc.lineno}: {bad!r}",
            template=template,
        ) from exc


def measure(
    value: Any, *, max_size: int, max_depth: int, max_nodes: int | None = None
) -> tuple[int, int]:
    """(expanded size, depth) of ``value``: size approximates the length of its JSON text,
    depth counts nested containers (a scalar is 0).  Raises ``_TooBig`` as soon as a bound is
    exceeded or an object contains itself.  Shared objects are measured once, so the cost is
    linear in the *parsed* graph, not in its expansion; ``max_nodes`` bounds that graph (what
    holding the spec costs: ``[{}, {}, …]`` is 3 characters per object)."""
    memo: dict[int, tuple[int, int]] = {}
    active: set[int] = set()
    nodes = 0

    def walk(node: Any, level: int) -> tuple[int, int]:
        nonlocal nodes
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            raise _TooBig("nodes")
        if isinstance(node, dict | list):
            key = id(node)
            if key in memo:
                return memo[key]
            if key in active:
                raise _TooBig("cycle")
            if level > max_depth:
                raise _TooBig("depth")
            active.add(key)
            size, depth = 2, 0
            items = node.items() if isinstance(node, dict) else ((None, v) for v in node)
            for k, v in items:
                child_size, child_depth = walk(v, level + 1)
                size += child_size + 1 + (len(str(k)) + 3 if k is not None else 0)
                depth = max(depth, child_depth)
                if size > max_size:
                    raise _TooBig("size")
            active.discard(key)
            memo[key] = (size, depth + 1)
            return memo[key]
        if isinstance(node, str):
            return len(node) + 2, 0
        return len(str(node)), 0

    return walk(value, 1)
