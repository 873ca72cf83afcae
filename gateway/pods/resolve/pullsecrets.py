"""``spec.imagePullSecrets`` → registry credentials for the backend — pure functions.

The resolver (``gateway.pods.resolve``) reads each referenced Secret by name through its
``RefCache`` (no cluster-wide Secret watch; under NodeRestriction a node may ``get`` exactly
the pull secrets of its own pods) and hands the lookups to ``resolve_pull_secrets``, which
returns the ``RegistryCredential``s that match at least one image of the pod (matching rules:
``vkgate_core.imageregistry``) and the Events to record.

Accepted Secrets, as the kubelet (``credentialprovider/secrets.MakeDockerKeyring``):

* ``kubernetes.io/dockerconfigjson``, key ``.dockerconfigjson``: ``{"auths": {server: entry}}``;
* ``kubernetes.io/dockercfg``, key ``.dockercfg``: ``{server: entry}``;

where an entry has ``username``/``password`` or ``auth`` = base64("user:pass") (``auth`` wins,
as in the kubelet).  Servers are normalized (``https://index.docker.io/v1/`` ≡ ``docker.io``).

What happens when something is wrong:

* A Secret that does not exist (404): one Warning ``FailedToRetrieveImagePullSecret`` with the
  kubelet's message, and the pod continues without it (the image may be public).
* A Secret that cannot be read (403, 5xx, timeout): the pod is held (not created) and retried
  with backoff, with a Warning naming the secret and the error.  Credentials are applied only
  at create, so creating without them on a passing error would lose them for the workload's
  life; a real case is the Node authorizer, which answers 403 until its graph has the new
  pod's edge to the Secret (seen on kube-apiserver 1.36 a few ms after the pod was created).
* A Secret that exists but is malformed (wrong type, missing key, bad base64/JSON, an entry
  without username/password): Warning ``InvalidImagePullSecret`` naming the secret and key,
  and the usable rest of it still applies.  The kubelet fails the image pull on an unparsable
  secret and silently ignores other types; we say why and let the backend try.

Credentials are read when the workload is created.  A pull secret that appears or changes
later applies at the next re-create; it does not restart a running workload (the kubelet, too,
uses pull secrets only when it pulls).

Internal to the resolver (``gateway.pods.resolve``): only the resolver module imports it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.pods.events import Event
from gateway.pods.resolve.env import Lookup, ReadError
from vkgate_core.imageregistry import RegistryCredential, normalize_server, server_matches

DOCKERCONFIGJSON = "kubernetes.io/dockerconfigjson"
DOCKERCFG = "kubernetes.io/dockercfg"
KEYS = {DOCKERCONFIGJSON: ".dockerconfigjson", DOCKERCFG: ".dockercfg"}
RETRIEVE_FAILED = "FailedToRetrieveImagePullSecret"
INVALID = "InvalidImagePullSecret"


@dataclass
class PullSecretResult:
    credentials: tuple[RegistryCredential, ...] = ()
    events: list[Event] = field(default_factory=list)
    #: "name: error" for Secrets that could not be read (not 404): hold the pod and retry.
    unreadable: list[str] = field(default_factory=list)


def pull_secret_names(pod: Mapping[str, Any]) -> list[str]:
    """Names in ``spec.imagePullSecrets``, in order, without duplicates or empty names (API
    validation lets ``{}`` entries through; the kubelet skips them too)."""
    names: dict[str, None] = {}
    for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []:
        name = str((ref or {}).get("name") or "") if isinstance(ref, Mapping) else ""
        if name:
            names[name] = None
    return list(names)


def pod_images(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [
        str(c.get("image") or "")
        for group in ("initContainers", "containers")
        for c in spec.get(group) or []
        if c.get("image")
    ]


class _Bad(ValueError):
    pass


def _entry_login(server: str, entry: Any) -> tuple[str, str]:
    if not isinstance(entry, Mapping):
        raise _Bad(f"entry for {server!r} is not an object")
    auth = entry.get("auth")
    if auth:
        try:
            decoded = base64.b64decode(str(auth), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise _Bad(f'entry for {server!r}: "auth" is not base64') from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise _Bad(f'entry for {server!r}: "auth" must be base64("username:password")')
        return user, password
    user, password = str(entry.get("username") or ""), str(entry.get("password") or "")
    if not user and not password:
        raise _Bad(
            f"entry for {server!r} has no username/password (identity or registry tokens "
            "are not supported)"
        )
    return user, password


def parse_secret(
    name: str, secret: Mapping[str, Any]
) -> tuple[list[RegistryCredential], list[str]]:
    """Credentials of one pull Secret (data base64, as the API returns it) and the problems
    found, each a full sentence naming the secret and key."""
    stype = str(secret.get("type") or "Opaque")
    key = KEYS.get(stype)
    where = f'image pull secret "{name}"'
    if key is None:
        return [], [
            f"{where} has type {stype}; only {DOCKERCONFIGJSON} ({KEYS[DOCKERCONFIGJSON]}) "
            f"and {DOCKERCFG} ({KEYS[DOCKERCFG]}) carry registry credentials"
        ]
    where = f'{where} key "{key}"'
    raw = (secret.get("data") or {}).get(key)
    if not raw:
        return [], [f"{where} is missing or empty"]
    try:
        doc = json.loads(base64.b64decode(str(raw), validate=True))
    except (binascii.Error, ValueError):
        return [], [f"{where} is not base64-encoded JSON"]
    if stype == DOCKERCONFIGJSON:
        auths = doc.get("auths") if isinstance(doc, Mapping) else None
        if not isinstance(auths, Mapping):
            return [], [f'{where} has no "auths" object']
    else:
        auths = doc if isinstance(doc, Mapping) else None
        if auths is None:
            return [], [f"{where} is not a JSON object"]
    creds: list[RegistryCredential] = []
    problems: list[str] = []
    for server_key, entry in auths.items():
        server = normalize_server(str(server_key))
        if not server:
            problems.append(f"{where}: server {server_key!r} has no host")
            continue
        try:
            user, password = _entry_login(str(server_key), entry)
        except _Bad as exc:
            problems.append(f"{where}: {exc}")
            continue
        creds.append(RegistryCredential(server, user, password, auth_source=f"secret/{name}"))
    return creds, problems


def resolve_pull_secrets(pod: Mapping[str, Any], secrets: Mapping[str, Lookup]) -> PullSecretResult:
    """The pod's pull credentials from already-read Secrets (``secrets``: name → object,
    None for 404, ``ReadError``); only credentials matching one of the pod's images are kept
    (deduplicated, in the order the pod lists its secrets)."""
    out = PullSecretResult()
    missing: list[str] = []
    found: list[RegistryCredential] = []
    for name in pull_secret_names(pod):
        obj = secrets.get(name)
        if isinstance(obj, ReadError):
            out.unreadable.append(f"{name}: {obj.message}")
            continue
        if obj is None:
            missing.append(name)
            continue
        creds, problems = parse_secret(name, obj)
        found.extend(creds)
        for problem in problems:
            out.events.append(
                Event(
                    "Warning",
                    INVALID,
                    f"{problem}; it is ignored, pulling the image may not succeed",
                )
            )
    if missing:
        out.events.insert(
            0,
            Event(
                "Warning",
                RETRIEVE_FAILED,
                f"Unable to retrieve some image pull secrets ({', '.join(missing)}); "
                "attempting to pull the image may not succeed.",
            ),
        )
    if out.unreadable:
        out.events.insert(
            0,
            Event(
                "Warning",
                RETRIEVE_FAILED,
                f"Unable to read image pull secrets ({'; '.join(out.unreadable)}); "
                "the pod is created once they can be read.",
            ),
        )
    images = pod_images(pod)
    out.credentials = tuple(_dedupe(c for c in found if _used(c, images)))
    return out


def _used(cred: RegistryCredential, images: list[str]) -> bool:
    return any(server_matches(cred.server, image) for image in images)


def _dedupe(creds: Iterable[RegistryCredential]) -> list[RegistryCredential]:
    seen: set[tuple[str, str, str]] = set()
    out: list[RegistryCredential] = []
    for c in creds:
        key = (c.server, c.username, c.password)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
