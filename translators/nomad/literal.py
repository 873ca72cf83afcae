"""Pod strings reach the Nomad task byte for byte: the one place that escapes them.

Nomad evaluates two mini-languages on what a job carries (docs/design/nomad.md, "What Nomad
interpolates"), and a pod string must survive both unchanged:

* **Driver ``Config``** (command, args, image, work_dir, volume binds, …) is decoded as HCL2
  *JSON syntax* with the task environment as variables: every string is an HCL template, so
  ``${…}`` is interpolated and ``%{…}`` is a directive.  The escapes are ``$${`` → ``${`` and
  ``%%{`` → ``%{``; nothing else (backslashes, quotes) is special.  ``config_literal``.
* **Task ``Env`` values** go through a regular expression, ``\\${[A-Za-z0-9_\\-.]+}``, replaced
  when the name is a known variable (node attributes, ``NOMAD_*``, the task's other env vars,
  and for raw_exec the host's environment) — and this one has **no escape**.  A value that
  contains such a reference is therefore not put into ``Env`` at all: it goes into a task
  template rendered with ``Envvars: true`` (template env vars are not interpolated), as a
  double-quoted ``go-envparse`` line, with delimiters that do not occur in it.  ``split_env``.

vkgate's own placeholder for the pod IP (``POD_IP_SENTINEL``, put by the gateway wherever a
``status.podIP`` fieldRef resolves) contains NUL, which no process argument or environment
value can contain; so it never collides with pod data and is the only thing that becomes a
live Nomad reference (``${attr.unique.network.ip-address}``: with host networking the pod IP
is the client node's address).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from translators.base import TranslationError

#: What the gateway puts where ``status.podIP`` resolves before Nomad placed the task.
POD_IP_SENTINEL = "\x00vkgate:pod-ip\x00"
#: The Nomad reference the sentinel becomes (a node attribute: host networking).
POD_IP_ATTR = "attr.unique.network.ip-address"

#: Nomad's env interpolation (helper/args.ReplaceEnv): a match may be replaced, unescapable.
ENV_REFERENCE = re.compile(r"\$\{[a-zA-Z0-9_\-.]+\}")
#: Keys go-envparse accepts in a template env file.
ENVFILE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./]*")
#: Where the env template of a task is written (in-memory secrets dir: values may be secret).
ENV_FILE = "secrets/vkgate.env"


def _hcl_escape(piece: str) -> str:
    return piece.replace("${", "$${").replace("%{", "%%{")


def config_literal(value: str) -> str:
    """A string for a driver ``Config`` field that HCL evaluates back to ``value``."""
    return ("${" + POD_IP_ATTR + "}").join(_hcl_escape(p) for p in value.split(POD_IP_SENTINEL))


def config_literals(values: Iterable[str]) -> list[str]:
    return [config_literal(v) for v in values]


def needs_env_file(value: str) -> bool:
    """True when Nomad's ``Env`` interpolation could change ``value`` (it has no escape)."""
    return any(ENV_REFERENCE.search(p) for p in value.split(POD_IP_SENTINEL))


def env_value(value: str) -> str:
    """An ``Env`` value (only for values where ``needs_env_file`` is False)."""
    return ("${" + POD_IP_ATTR + "}").join(value.split(POD_IP_SENTINEL))


def delimiters(content: str) -> tuple[str, str]:
    """Template delimiters that do not occur in ``content`` (so nothing in it is evaluated)."""
    n = 0
    while True:
        left, right = f"[[vkgate{n or ''}", f"vkgate{n or ''}]]"
        if left not in content and right not in content:
            return left, right
        n += 1


@dataclass(frozen=True)
class TaskEnv:
    """One task's environment: ``env`` for ``Env``, ``template`` (or None) for ``Templates``."""

    env: dict[str, str]
    template: dict[str, Any] | None


def split_env(env: Mapping[str, str], *, container: str) -> TaskEnv:
    """Put each value where Nomad leaves it unchanged (see the module docstring)."""
    plain: dict[str, str] = {}
    lines: list[tuple[str, list[str]]] = []
    for key, value in env.items():
        if not needs_env_file(value):
            plain[key] = env_value(value)
            continue
        if not ENVFILE_KEY.fullmatch(key):
            raise TranslationError(
                f"env var {key!r}: its value contains {ENV_REFERENCE.search(value)[0]!r}"  # type: ignore[index]
                " which Nomad would interpolate, and the name cannot be written to a Nomad"
                " env file (names must match [A-Za-z_][A-Za-z0-9_./]*)",
                field=f"spec.containers[{container}].env[{key}]",
            )
        lines.append((key, value.split(POD_IP_SENTINEL)))
    if not lines:
        return TaskEnv(plain, None)
    quoted = [(k, [json.dumps(p, ensure_ascii=False)[1:-1] for p in parts]) for k, parts in lines]
    left, right = delimiters("\n".join(p for _, parts in quoted for p in parts))
    ip = f'{left} env "{POD_IP_ATTR}" {right}'
    body = "".join(f'{k}="{ip.join(parts)}"\n' for k, parts in quoted)
    return TaskEnv(
        plain,
        {
            "EmbeddedTmpl": body,
            "DestPath": ENV_FILE,
            "ChangeMode": "noop",
            "Perms": "0600",
            "Envvars": True,
            "LeftDelim": left,
            "RightDelim": right,
        },
    )
