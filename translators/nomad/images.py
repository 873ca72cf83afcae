"""``containerStatuses[].imageID`` on Nomad: known where the task runs an image pinned by digest.

The kubelet reports the digest the runtime ran (``docker.io/library/busybox@sha256:…``).
Nomad's API never says which image a docker task runs: the docker driver keeps the image ID
to itself (its task handle is not in the allocation), and allocation stubs and events do not
carry the job spec.  What vkgate does know is the job it submitted: a docker task whose
``Config.image`` names a digest runs exactly that content, so its imageID is the image's
repository with that digest, recorded in the job's ``Meta["vkgate.image_ids"]`` at submit
(``name=<id>``, comma-separated) and reported once the task has run.  A tag-only image leaves
imageID empty (the digest a tag resolved to is Nomad's secret), and so does raw_exec, which
runs no image at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vkgate_core.imageregistry import image_location

META_IMAGE_IDS = "vkgate.image_ids"
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def image_id(image: str) -> str:
    """``<host>/<repository>@sha256:…`` for an image pinned by digest, else ``""``."""
    m = _DIGEST.search(image.strip())
    if m is None:
        return ""
    host, path = image_location(image)
    return f"{host}/{path}@{m.group(1)}"


def meta(job: Mapping[str, Any]) -> dict[str, str]:
    """The ``Meta`` entry for the docker tasks of ``job`` pinned by digest (empty: none)."""
    ids: list[str] = []
    for group in job.get("TaskGroups") or []:
        for task in (group or {}).get("Tasks") or []:
            if task.get("Driver") != "docker":
                continue
            found = image_id(str((task.get("Config") or {}).get("image") or ""))
            if found:
                ids.append(f"{task.get('Name')}={found}")
    return {META_IMAGE_IDS: ",".join(ids)} if ids else {}


def parse(value: str) -> dict[str, str]:
    """``Meta["vkgate.image_ids"]`` → task name → imageID."""
    out: dict[str, str] = {}
    for item in value.split(","):
        name, sep, found = item.partition("=")
        if sep and name and found:
            out[name] = found
    return out
