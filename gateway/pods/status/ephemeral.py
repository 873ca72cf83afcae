"""Ephemeral containers (``kubectl debug``) on a backend that cannot run them: a status that
says why, never silence.  Pure functions.

``kubectl debug`` adds a container to a *running* pod (the ``pods/ephemeralcontainers``
subresource).  None of vkgate's backends can add a container to a running workload without
replacing it — a Nomad job update that adds a task replaces the allocation, restarting every
container of the pod; a Zun container or capsule and an Azure Batch task are fixed once
created — so a backend declares the ``ephemeralContainers`` pod feature only if it can
(``translators.base.Features``), and for the others each ephemeral container gets:

* a Warning Event ``UnsupportedPodFeature`` naming ``spec.ephemeralContainers[<name>]`` (once
  per container; ``gateway.pods.decide``), and
* an ``ephemeralContainerStatuses`` entry **terminated** with exit code 128 and the same reason
  and message — what a container runtime reports for a container it could not start
  (containerd's ``StartError``).  Terminated, not waiting: it will never run, and an ephemeral
  container never restarts, so API validation keeps the entry final; ``kubectl debug -it``
  stops waiting for it and falls back to its logs, which the kubelet API refuses with the same
  message (``gateway.kubelet.api.routes``).  A waiting entry would leave ``kubectl debug -it``
  waiting forever.

``kubectl exec`` into a running container works on the backends with an ``Executor``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

REASON = "UnsupportedPodFeature"
FEATURE = "ephemeralContainers"
#: What a runtime reports for a container it could not start (containerd, ``StartError``).
EXIT_CODE = 128

JSON = dict[str, Any]


def names(pod: Mapping[str, Any]) -> list[str]:
    """The ephemeral containers of ``pod``, in spec order."""
    return [str(c.get("name", "")) for c in (pod.get("spec") or {}).get(FEATURE) or []]


def message(names: list[str], *, backend: str) -> str:
    """Why ``names`` will not run (Event and container status alike)."""
    fields = ", ".join(f"spec.ephemeralContainers[{n}]" for n in names)
    return (
        f"{fields}: ephemeral containers are not supported by the {backend} backend: it cannot "
        "add a container to a running workload without replacing it (which would restart the "
        "pod); use kubectl exec into a running container instead"
    )


def _terminated(spec_c: Mapping[str, Any], *, backend: str, now: _dt.datetime) -> JSON:
    name = str(spec_c.get("name", ""))
    return {
        "name": name,
        "image": str(spec_c.get("image", "")),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {
            "terminated": {
                "exitCode": EXIT_CODE,
                "reason": REASON,
                "message": message([name], backend=backend),
                "finishedAt": now.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        },
    }


def with_statuses(
    desired: JSON, pod: Mapping[str, Any], *, supported: bool, backend: str, now: _dt.datetime
) -> JSON:
    """``desired`` with an ``ephemeralContainerStatuses`` entry for every ephemeral container
    of ``pod`` the backend cannot run; entries already reported stay as they are (they are
    final).  Unchanged when the backend runs them, the pod has none, or the pod is terminal."""
    spec_cs = (pod.get("spec") or {}).get(FEATURE) or []
    if supported or not spec_cs or desired.get("phase") in ("Succeeded", "Failed"):
        return desired
    have = {
        str(s.get("name")): s
        for s in desired.get("ephemeralContainerStatuses")
        or (pod.get("status") or {}).get("ephemeralContainerStatuses")
        or []
    }
    statuses = [
        have.get(str(c.get("name"))) or _terminated(c, backend=backend, now=now) for c in spec_cs
    ]
    return {**desired, "ephemeralContainerStatuses": statuses}
