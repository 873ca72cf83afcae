"""imagePullSecrets on Nomad: a registry password in the job, or none at all.

The docker driver reads a task's registry login from the job's ``auth`` block, before any of
the task's templates run, so it cannot move to the job's Nomad Variable: every token with
``read-job`` reads it, in every version of the job.  So a pod with ``imagePullSecrets`` is
refused unless the node says how to pull (``backend.nomad.registry_auth``):

==========  ================================================================================
``reject``  (default) refused, reason ``UnsupportedPodFeature``, field ``spec.imagePullSecrets``
``job``     the credential that matches a task's image (``vkgate_core.imageregistry``) becomes
            its docker ``auth {username, password, server_address}`` (``server_address`` =
            the image's registry host, ``docker.io`` for Docker Hub); raw_exec ignores it
``client``  no ``auth`` block: the Nomad clients log in themselves, with the credential helper
            of their docker plugin configuration (docs/backends/nomad.md, "Secrets and Nomad
            Variables"); the pod's imagePullSecrets are not sent anywhere
==========  ================================================================================
"""

from __future__ import annotations

from typing import Any

from translators.base import ResolvedContainer, ResolvedPod, UnsupportedError
from translators.nomad.config import NomadConfig
from vkgate_core.imageregistry import credential_for, image_host

FIELD = "spec.imagePullSecrets"


def check(pod: ResolvedPod, cfg: NomadConfig) -> None:
    """Refuse a pod with imagePullSecrets (or registry credentials) on a ``reject`` node."""
    listed = (pod.pod.get("spec") or {}).get("imagePullSecrets")
    if cfg.registry_auth != "reject" or not (listed or pod.registry_credentials):
        return
    raise UnsupportedError(
        "imagePullSecrets would put registry passwords into the Nomad job, where every token "
        'with read-job reads them; backend.nomad.registry_auth = "client" lets the Nomad '
        'clients\' own credential helper log in instead, "job" puts them into the job '
        '(this node: "reject")',
        reason="UnsupportedPodFeature",
        field=FIELD,
    )


def task_auth(c: ResolvedContainer, pod: ResolvedPod, cfg: NomadConfig) -> dict[str, Any] | None:
    """The docker ``auth`` block of a container's task (``registry_auth = "job"`` only)."""
    if cfg.registry_auth != "job":
        return None
    cred = credential_for(c.image, pod.registry_credentials)
    if cred is None:
        return None
    return {
        "username": cred.username,
        "password": cred.password,
        "server_address": image_host(c.image),
    }
