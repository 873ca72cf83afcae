"""The node's policy on a rendered Zun container or capsule (docs/architecture.md, "Render, then
admit").

A template customizes the body; the node's settings constrain it.  After every render (the
agent's ``create`` and ``vkgate render`` alike: both go through ``SpecBuilder``), ``enforce``
refuses with a ``PolicyRefused`` naming the template, the field and the setting:

* a key of ``TEMPLATE_KEYS`` (``host``, ``privileged``, ``runtime``, ``security_groups``,
  ``auto_remove``, ``hostname``) whose value is not vkgate's own — on a standalone container,
  and on every container of a capsule, whose containers Zun builds from the keys it is given
  without the policy checks of ``POST /containers``.  vkgate's own values are the pod's
  ``hostname`` and the node's (or the pod's annotated) security groups of a standalone
  container; nothing else.  ``None`` reads as absent, and so does ``false`` for
  ``privileged``/``auto_remove``.  ``template_keys`` names the keys a template may set;
* with ``secret_files = "reject"``: Secret file contents (text or base64) the template placed in
  the body (``translators.secretscan``) — Zun has no file a Secret could go into, so a
  template that carries one puts it into plain fields (``environment``, labels).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from translators import secretscan
from translators.base import JSON, PolicyRefused

SETTING_KEYS = "backend.zun.template_keys"
SETTING_FILES = "backend.zun.secret_files"

#: What each guarded key does, for the refusal's message (``config.TEMPLATE_KEYS``).
WHY: dict[str, str] = {
    "host": "places the container on a compute host of the template's choosing",
    "privileged": "runs the container privileged (the compute host's devices and kernel)",
    "runtime": "chooses the container runtime",
    "security_groups": "changes the security groups the node gives the container",
    "auto_remove": "lets Zun remove the container when it exits (vkgate loses its status)",
    "hostname": "sets a hostname other than the pod's",
}
_FALSE_IS_ABSENT = frozenset({"privileged", "auto_remove"})


def _absent(key: str, value: Any) -> bool:
    return value is None or (value is False and key in _FALSE_IS_ABSENT)


def _same(value: Any, own: Any) -> bool:
    if isinstance(value, list) and isinstance(own, list):
        return sorted(map(str, value)) == sorted(map(str, own))
    return bool(value == own)


def _containers(kind: str, body: JSON) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, object) of every object a guarded key may sit on."""
    if kind == "container":
        yield "", body
        return
    tpl = body.get("template")
    if not isinstance(tpl, dict):
        return
    yield "template.", tpl
    spec = tpl.get("spec")
    if not isinstance(spec, dict):
        return
    yield "template.spec.", spec
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            if isinstance(c, dict):
                yield f"template.spec.{group}[{i}].", c


def enforce(
    kind: str,
    body: JSON,
    *,
    info: Mapping[str, Any],
    template: str,
    allowed: Iterable[str],
    secret_files: str,
    secrets: Sequence[str | bytes] = (),
    public: Any = None,
) -> None:
    """``PolicyRefused`` when the rendered ``body`` asks for more than the node allows;
    ``info`` is vkgate's ``backend_info`` for it, ``public`` the strings vkgate computed."""
    allowed = set(allowed)
    own: dict[str, Any] = {}
    if kind == "container":
        own = {
            "hostname": info.get("hostname") or None,
            "security_groups": list(info.get("security_groups") or []) or None,
        }
    for where, obj in _containers(kind, body):
        for key, why in WHY.items():
            if key in allowed or key not in obj:
                continue
            value, mine = obj[key], own.get(key) if where == "" else None
            if (_absent(key, value) and mine is None) or _same(value, mine):
                continue
            shown = "none" if mine is None else json.dumps(mine)
            raise PolicyRefused(
                f"{why}: {json.dumps(value)} (vkgate's own: {shown})",
                template=template,
                field=f"{where}{key}",
                setting=SETTING_KEYS,
            )
    if secret_files == "reject":
        found = secretscan.placed(body, secrets, public=public)
        if found is not None:
            raise PolicyRefused(
                "carries the content of a Secret file of the pod, which Zun can only hold in "
                "plain fields",
                template=template,
                field=found,
                setting=SETTING_FILES,
            )
