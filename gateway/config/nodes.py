"""``[[nodes]]``: one process, several virtual nodes (docs/design/multinode.md).

A settings file may list node entries; each entry holds only what differs per node and is laid
over the top-level sections, which become the shared defaults::

    [kubelet]                       # shared: certificates, client CA, metrics_address
    [backend.nomad]                 # shared: address
    address = "http://nomad:4646"

    [[nodes]]
    name = "vk-dc1"                 # any [node] key: labels, taint, capacity, internal_ip, ...
    kubelet = { port = 10250 }      # [kubelet] keys, except the process-wide metrics_address
    backend = { kind = "nomad", nomad = { datacenters = ["dc1"] } }
    probes = { allow_host = true }  # [probes] keys

This module only turns raw tables into one settings table per node (plain dicts, before
coercion); ``gateway.config`` builds and validates each one as a whole ``Settings``.  An error in
node ``i`` names the key as the user would write it in that entry: ``nodes[1].kubelet.port``,
``nodes[1].backend.nomad.address``, ``nodes[0].labels.zone`` (``rename_key``), even when the
offending value came from the shared default it inherited.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vkgate_core.settings import SettingsError, merge_tables

#: Sections an entry may set besides the ``[node]`` keys; the rest are process-wide.
PER_NODE_TABLES = ("kubelet", "backend", "probes")
#: ``[kubelet]`` keys one process serves once (its own metrics and probes endpoint).
PROCESS_WIDE_KUBELET = frozenset({"metrics_address"})


def entry_tables(
    data: Mapping[str, Any], entries: Any, *, node_keys: Sequence[str], kubelet_keys: Sequence[str]
) -> list[dict[str, Any]]:
    """One whole settings table per entry: ``data`` (without ``nodes``) with the entry's own
    ``[node]`` keys, ``kubelet``, ``backend`` and ``probes`` tables merged over the shared ones."""
    if not isinstance(entries, list) or not entries:
        raise SettingsError("nodes", "expected a non-empty list of [[nodes]] tables")
    shared = {k: v for k, v in data.items() if k != "nodes"}
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        prefix = f"nodes[{i}]"
        if not isinstance(entry, Mapping):
            raise SettingsError(prefix, f"expected a table, got {entry!r}")
        known = sorted({*node_keys, *PER_NODE_TABLES})
        for key in entry:
            if key not in known:
                raise SettingsError(
                    f"{prefix}.{key}",
                    f"not a per-node setting (per node: {', '.join(known)}; "
                    "set the others once, at the top level)",
                )
        if "name" not in entry:
            raise SettingsError(f"{prefix}.name", "every [[nodes]] entry needs a name")
        kubelet = entry.get("kubelet", {})
        for key in PER_NODE_TABLES:
            value = entry.get(key, {})
            if not isinstance(value, Mapping):
                raise SettingsError(f"{prefix}.{key}", f"expected a table, got {value!r}")
        for key in kubelet:
            if key in PROCESS_WIDE_KUBELET:
                raise SettingsError(
                    f"{prefix}.kubelet.{key}", "is process-wide: set it once, in [kubelet]"
                )
            if key not in kubelet_keys:
                raise SettingsError(
                    f"{prefix}.kubelet.{key}",
                    f"unknown setting (known: {', '.join(sorted(kubelet_keys))})",
                )
        node = {k: v for k, v in entry.items() if k not in PER_NODE_TABLES}
        table = dict(shared)
        table["node"] = merge_tables(_table(shared, "node"), node)
        for key in PER_NODE_TABLES:
            table[key] = merge_tables(_table(shared, key), entry.get(key, {}))
        out.append(table)
    return out


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    return value if isinstance(value, Mapping) else {}


def rename_key(index: int, key: str) -> str:
    """The key of a per-node setting as written in entry ``index``; shared sections keep theirs."""
    prefix = f"nodes[{index}]"
    if key.startswith("node."):
        return f"{prefix}.{key.removeprefix('node.')}"
    if key.startswith(tuple(f"{t}." for t in PER_NODE_TABLES)) or key in PER_NODE_TABLES:
        return f"{prefix}.{key}"
    return key


def check_unique(units: Sequence[tuple[str, int, bool]]) -> None:
    """Node names, and kubelet ports of the nodes that serve one, are unique in a process."""
    names: dict[str, int] = {}
    ports: dict[int, int] = {}
    for i, (name, port, serves) in enumerate(units):
        if name in names:
            raise SettingsError(
                f"nodes[{i}].name", f"{name!r} is already the name of nodes[{names[name]}]"
            )
        names[name] = i
        if not serves:
            continue
        if port in ports:
            raise SettingsError(
                f"nodes[{i}].kubelet.port",
                f"{port} is already the kubelet port of nodes[{ports[port]}]",
            )
        ports[port] = i
