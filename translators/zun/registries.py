"""Zun registry objects for imagePullSecrets: create-or-reuse one per (registry host, username).

Zun does not take a login in the container create body; it takes ``registry`` — the uuid (or
name) of a *registry object* created beforehand with ``POST /v1/registries``
(``{"registry": {name, domain, username, password}}``, microversion 1.30; the container key
needs 1.31).  So for a pod whose image matches one of its pull credentials vkgate:

1. names the object ``<prefix>-registry-<12 hex of sha256(host, username)>`` — deterministic,
   so every vkgate (and every restart) finds the same one, and owned by vkgate by that prefix;
2. looks it up by name (``GET /registries?name=…``); creates it when missing; when it exists
   but this process has not written this password yet — Zun shows passwords as ``***``, so they
   cannot be compared — updates it with ``PATCH`` (a rotated pull secret reaches Zun);
3. passes its uuid as the container's ``registry``.

``domain`` is the image's registry host (``docker.io`` for Docker Hub).  Registry objects are
never deleted by vkgate: other containers may still reference them, they hold no quota, and a
re-created pod reuses them (``openstack appcontainer registry delete`` removes them).

Not covered — the pod runs without credentials and the translator says why (a Warning event;
the image may be public): capsules (multi-container pods; a capsule container has no
``registry``), a server below microversion 1.31 (one log line), a registry API that refuses
(403 policy, 400).  An unreachable or throttled API fails the create, which is retried.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from translators.zun.client import ZunClient
from vkgate_core.imageregistry import RegistryCredential

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegistryRef:
    uuid: str
    name: str
    domain: str
    username: str


def registry_name(prefix: str, domain: str, username: str) -> str:
    digest = hashlib.sha256(f"{domain}\0{username}".encode()).hexdigest()[:12]
    return f"{prefix or 'vkgate'}-registry-{digest}"


def _digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


class Registries:
    """The registry objects this translator created or adopted (per process)."""

    def __init__(self, client: ZunClient, *, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        #: (domain, username) → (object, sha256 of the password last written)
        self._known: dict[tuple[str, str], tuple[RegistryRef, str]] = {}

    async def ensure(self, domain: str, cred: RegistryCredential) -> RegistryRef:
        """The registry object holding ``cred`` for ``domain``; creates or updates it."""
        key = (domain, cred.username)
        digest = _digest(cred.password)
        known = self._known.get(key)
        if known is not None and known[1] == digest:
            return known[0]
        name = registry_name(self.prefix, domain, cred.username)
        found = [r for r in await self.client.find_registries(name=name) if r.get("uuid")]
        login = {"domain": domain, "username": cred.username, "password": cred.password}
        if found:
            raw = await self.client.update_registry(str(found[0]["uuid"]), login)
            log.info("zun: updated registry %s (%s, user %s)", name, domain, cred.username)
        else:
            raw = await self.client.create_registry({"name": name, **login})
            log.info("zun: created registry %s (%s, user %s)", name, domain, cred.username)
        ref = RegistryRef(
            uuid=str(raw.get("uuid") or (found[0]["uuid"] if found else "")),
            name=name,
            domain=domain,
            username=cred.username,
        )
        self._known[key] = (ref, digest)
        return ref
