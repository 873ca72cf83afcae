"""The node's policy on a rendered Batch task (docs/design/threat-model.md, "Render, then admit").

A task template customizes; the node's settings constrain what it may render.  After every
render (the agent's ``create`` and ``vkgate render`` alike: both go through
``TaskBuilder.build``), ``enforce`` compares the task with what vkgate computed for it and
refuses, with a ``PolicyRefused`` naming the template, the field and the setting:

* ``containerSettings.containerRunOptions`` beyond vkgate's own options
  (``translators.batch.runoptions.check``; ``template_run_options`` names more);
* a ``userIdentity`` above vkgate's own: a named user account, an auto-user of ``pool`` scope
  (shared by every task on the node) or ``admin`` elevation.  An auto-user of ``task`` scope
  without elevation, or no identity at all (the pool default: a non-admin user of the task),
  is fine;
* what vkgate never builds, anywhere in the task: ``resourceFiles`` (and a multi-instance
  task's ``commonResourceFiles``: downloads from sources vkgate did not choose),
  ``authenticationTokenSettings`` (a Batch token for the job, which holds every pod's tasks),
  ``containerHostBatchBindMounts`` (directories of the pool node inside the container) and
  ``identityReference`` (the pool's managed identity, for a registry, a download or an upload);
* with ``secret_env = "reject"``: a Secret value (text or base64) the template placed in the
  task (``translators.secretscan``).

Each guarded key is allowed by name in ``template_keys``.  A ``containerSettings.imageName`` the
template changed must still be an image reference (a ``TranslationError`` otherwise: it sits on
the same ``docker create`` line as the options).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from translators import secretscan
from translators.base import JSON, PolicyRefused, TranslationError, UnsupportedError
from translators.batch import runoptions
from translators.batch.settings import BatchSettings
from translators.podstrings import image_ref

SETTING_KEYS = "backend.batch.template_keys"
SETTING_SECRETS = "backend.batch.secret_env"

#: What each guarded key gives a task, for the refusal's message (the keys are
#: ``settings.TEMPLATE_KEYS``).
WHY: dict[str, str] = {
    "userIdentity": "runs the task as more than the node's own identity",
    "resourceFiles": "downloads files from sources vkgate did not choose",
    "authenticationTokenSettings": "hands the task a Batch token for its job (every pod's tasks)",
    "containerHostBatchBindMounts": "mounts directories of the pool node into the container",
    "identityReference": "acts as the pool's managed identity",
}
#: Keys that mean the same as a guarded one.
ALIASES = {"commonResourceFiles": "resourceFiles"}


def _keys(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every key of a JSON value."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            yield sub, str(key), value
            yield from _keys(value, sub)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _keys(value, f"{path}[{i}]")


def _modest(identity: Any) -> bool:
    """No more than a non-admin auto-user of the task's own scope (or the pool default)."""
    if identity in (None, {}):
        return True
    if not isinstance(identity, dict) or set(identity) != {"autoUser"}:
        return False
    auto = identity["autoUser"]
    if not isinstance(auto, dict) or not set(auto) <= {"scope", "elevationLevel"}:
        return False
    scope, level = auto.get("scope"), auto.get("elevationLevel", "nonadmin")
    return (
        isinstance(scope, str)
        and scope.lower() == "task"
        and isinstance(level, str)
        and level.lower() == "nonadmin"
    )


def enforce(
    out: JSON,
    task: JSON,
    *,
    template: str,
    settings: BatchSettings,
    secrets: Sequence[str | bytes] = (),
) -> None:
    """``PolicyRefused`` when the rendered ``out`` asks for more than the node allows;
    ``task`` is what vkgate computed for it (``TaskBuilder._task``)."""
    allowed = set(settings.template_keys)
    own_cs: JSON = task["container_settings"]
    cs = out.get("containerSettings")
    if isinstance(cs, dict):
        runoptions.check(
            cs.get("containerRunOptions"),
            computed=own_cs["containerRunOptions"],
            node_options=settings.container_run_options,
            allowed=settings.template_run_options,
            template=template,
        )
        image = cs.get("imageName")
        if image != own_cs["imageName"]:
            try:
                image_ref(str(image), field="containerSettings.imageName")
            except UnsupportedError as exc:
                raise TranslationError(
                    str(exc), template=template, field="containerSettings.imageName"
                ) from None

    identity = out.get("userIdentity")
    elevated = identity != task["user_identity"] and not _modest(identity)
    if elevated and "userIdentity" not in allowed:
        own = json.dumps(task["user_identity"]) if task["user_identity"] else "pool default"
        raise PolicyRefused(
            f"{WHY['userIdentity']} ({own}): {json.dumps(identity)}",
            template=template,
            field="userIdentity",
            setting=SETTING_KEYS,
        )

    for path, key, value in _keys(out):
        name = ALIASES.get(key, key)
        if name == "userIdentity" or name not in WHY or name in allowed:
            continue
        if value in (None, [], {}, ""):
            continue
        raise PolicyRefused(
            f"{WHY[name]}; vkgate builds no {name}",
            template=template,
            field=path,
            setting=SETTING_KEYS,
        )

    if settings.secret_env == "reject":
        where = secretscan.placed(out, secrets, public=task)
        if where is not None:
            raise PolicyRefused(
                "carries a Secret value of the pod, and Batch keeps no task field secret",
                template=template,
                field=where,
                setting=SETTING_SECRETS,
            )
