"""Which registry an image comes from, and which pull credential applies to it.

Pure functions shared by the gateway (which keeps only the ``imagePullSecrets`` credentials
that match one of the pod's images) and every translator (which picks the credential for each
container's image).  A Kubernetes helper (the kubelet's credential keyring), so it lives in the neutral core,
below both the gateway and the translators.

Rules (the kubelet's credential keyring, ``pkg/credentialprovider``, plus Docker's reference
parsing), with the differences noted:

* **Image → (host, path).**  The first path component is a registry host when it contains
  ``.`` or ``:`` or is ``localhost``; otherwise the image is on Docker Hub and a one-component
  name gets ``library/``.  Tags and digests are dropped.  ``docker.io``, ``index.docker.io``,
  ``registry-1.docker.io`` and ``registry.hub.docker.com`` are all Docker Hub (``docker.io``).
* **Server keys are normalized** (``normalize_server``): scheme and a ``/v1/``/``/v2/`` path
  prefix are dropped (Docker treats them as the bare host), the host is lower-cased, Docker Hub
  aliases become ``docker.io``; a remaining path (``quay.io/team``) restricts the credential to
  that repository prefix.  So ``https://index.docker.io/v1/`` (what ``kubectl create secret
  docker-registry`` writes by default) matches ``busybox``.  The kubelet only matches bare
  images against the key ``index.docker.io``; we treat every Hub alias alike.
* **Matching**: host labels may be ``*`` globs (``*.azurecr.io``, one label per ``*``), a
  port must be equal, the key's path must be a whole-segment prefix of the image path (the
  kubelet uses a plain string prefix, so ``quay.io/team`` also matched ``quay.io/teamx``).
* **Order**: exact hosts before wildcards, longer paths first, then the order the pod listed
  them — the first is what a backend that takes one credential per image gets.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

DOCKER_HUB = "docker.io"
HUB_ALIASES = frozenset(
    {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


@dataclass(frozen=True, slots=True)
class RegistryCredential:
    """Registry login from a pod's ``imagePullSecrets`` (resolved by the gateway).

    ``server`` is normalized: no scheme, no ``/v1/``/``/v2/`` suffix, Docker Hub spelled
    ``docker.io``; it may carry a repository path (``quay.io/team``) or a ``*.`` wildcard
    host.  ``credential_for(image, creds)`` picks the one for an image.
    ``auth_source`` says where it came from (``secret/<name>``).  The password is never in
    ``repr``."""

    server: str
    username: str
    password: str = field(repr=False)
    auth_source: str = ""


def image_location(image: str) -> tuple[str, str]:
    """``(registry host[:port], repository path)`` of an image reference."""
    ref = image.strip().split("@", 1)[0]
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        host, path = first.lower(), rest
    else:
        host, path = DOCKER_HUB, ref
    if host in HUB_ALIASES:
        host = DOCKER_HUB
        if "/" not in path:
            path = "library/" + path
    slash, colon = path.rfind("/"), path.rfind(":")
    if colon > slash:
        path = path[:colon]
    return host, path


def image_host(image: str) -> str:
    """The registry host[:port] an image is pulled from (``docker.io`` for Docker Hub)."""
    return image_location(image)[0]


def normalize_server(server: str) -> str:
    """A docker config ``auths`` key → ``host[:port][/path]``; ``""`` when there is no host."""
    text = _SCHEME.sub("", server.strip())
    host, _, path = text.partition("/")
    path = path.strip("/")
    if path in ("v1", "v2") or path.startswith(("v1/", "v2/")):
        path = path[3:]
    host = host.lower()
    if host in HUB_ALIASES:
        host = DOCKER_HUB
    if not host:
        return ""
    return f"{host}/{path}" if path else host


def _split(server: str) -> tuple[str, str]:
    host, _, path = server.partition("/")
    return host, path


def _host_matches(pattern: str, host: str) -> bool:
    p_name, _, p_port = pattern.partition(":")
    h_name, _, h_port = host.partition(":")
    if p_port != h_port:
        return False
    p_labels, h_labels = p_name.split("."), h_name.split(".")
    if len(p_labels) != len(h_labels):
        return False
    return all(fnmatch.fnmatchcase(h, p) for p, h in zip(p_labels, h_labels, strict=True))


def server_matches(server: str, image: str) -> bool:
    """True when the normalized ``server`` key applies to ``image``."""
    s_host, s_path = _split(server)
    host, path = image_location(image)
    if not s_host or not _host_matches(s_host, host):
        return False
    return not s_path or path == s_path or path.startswith(s_path + "/")


def _specificity(server: str) -> tuple[int, int]:
    host, path = _split(server)
    return (1 if "*" in host else 0, -len(path.split("/")) if path else 0)


def credentials_for(
    image: str, credentials: Iterable[RegistryCredential]
) -> list[RegistryCredential]:
    """Every credential that applies to ``image``, most specific first (stable otherwise)."""
    found = [c for c in credentials if server_matches(c.server, image)]
    return sorted(found, key=lambda c: _specificity(c.server))


def credential_for(
    image: str, credentials: Sequence[RegistryCredential]
) -> RegistryCredential | None:
    """The credential a backend that takes one login per image should use, or None."""
    found = credentials_for(image, credentials)
    return found[0] if found else None
