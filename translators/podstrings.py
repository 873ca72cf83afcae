"""Pod strings that reach text a backend parses again: checked here, refused by field.

A kubelet never lets a pod's strings become host options: the API server validates paths and
names, and the container runtime receives structured mounts, never a command line.  A backend
that must write pod strings into text another program splits again — Azure Batch hands
``containerRunOptions`` to ``docker create``, docker splits a volume spec at ``:``, docker-py
joins an environment entry as ``NAME=value`` — checks each string here first and refuses the pod
with the field named (``UnsupportedError``), instead of quoting its way around a parser it
cannot see.  What is only ever JSON data (an env value, an argument in a list) is not checked:
it stays data.

* ``container_path`` — a path inside the container (``workingDir``): absolute, clean (no empty,
  ``.`` or ``..`` segment; one trailing ``/`` is fine), printable (no control or format
  character).
* ``mount_path`` — a ``mountPath``: a ``container_path`` without ``:``, docker's separator of
  ``source:destination:mode``.
* ``relative_path`` — a ``subPath`` or a volume file's path: relative, no ``..`` segment,
  printable (the API server's ``validateLocalDescendingPath``).
* ``option_word`` — a value written into an option string: ASCII letters, digits and
  ``_@+=:,./-`` only, not starting with ``-``.  Such a word reads alike to every splitter
  (a POSIX shell, ``shlex``, splitting at whitespace, Windows' ``CommandLineToArgvW``, ``cmd``):
  ``shlex.quote`` returns it unchanged.
* ``env_name`` — printable ASCII without ``=`` (the API server's rule since Kubernetes 1.30):
  an ``=`` would move the split of ``NAME=value``.
* ``dns_label`` — a container name (RFC 1123 label, as the API server requires): it is joined
  into backend labels and display names that vkgate splits again to map workloads back.
* ``image_ref`` — an image reference in the distribution grammar (``[host[:port]/]path[:tag]
  [@digest]``); the kubelet reports ``InvalidImageName`` for anything else.
"""

from __future__ import annotations

import re

from translators.base import ResolvedContainer, UnsupportedError

REASON = "UnsupportedPodFeature"
IMAGE_REASON = "InvalidImageName"

WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")

# distribution/reference's grammar (reference/regexp.go), ASCII only
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?")
NAME_TOTAL_MAX = 255


class PodStringError(UnsupportedError):
    """A pod string a backend cannot carry safely; ``why`` is the rule it broke."""

    def __init__(self, field: str, value: str, why: str, *, reason: str = REASON) -> None:
        super().__init__(f"{field} {value!r}: {why}", reason=reason, field=field)
        self.why = why


def _refuse(field: str, value: str, why: str, *, reason: str = REASON) -> PodStringError:
    return PodStringError(field, value, why, reason=reason)


def container_field(c: ResolvedContainer) -> str:
    """The pod field of ``c``: ``spec.containers[<name>]`` or ``spec.initContainers[<name>]``
    (sidecars are init containers)."""
    group = "containers" if c.role == "main" else "initContainers"
    return f"spec.{group}[{c.name}]"


def _printable(value: str, field: str) -> None:
    if not value.isprintable():
        raise _refuse(field, value, "contains a control or format character")


def container_path(value: str, *, field: str) -> str:
    """``value`` when it is an absolute, clean, printable path; else ``UnsupportedError``."""
    _printable(value, field)
    if not value.startswith("/"):
        raise _refuse(field, value, "must be an absolute path")
    segments = value[1:].split("/")
    if segments[-1] == "":
        segments.pop()  # one trailing slash ("/data/", and "/" itself)
    if any(s in ("", ".", "..") for s in segments):
        raise _refuse(field, value, "must be a clean path (no empty, '.' or '..' segment)")
    return value


def mount_path(value: str, *, field: str) -> str:
    """A ``container_path`` without ``:`` (docker splits a volume spec there)."""
    container_path(value, field=field)
    if ":" in value:
        raise _refuse(field, value, "must not contain ':' (docker splits a volume spec at ':')")
    return value


def relative_path(value: str, *, field: str) -> str:
    """A relative path inside a volume: not absolute, no ``..`` segment, printable."""
    _printable(value, field)
    if value.startswith("/"):
        raise _refuse(field, value, "must be a relative path")
    if ".." in value.split("/"):
        raise _refuse(field, value, "must not contain a '..' segment")
    return value


def option_word(value: str, *, field: str) -> str:
    """``value`` when it can be written into an option string as one plain word."""
    if not WORD.fullmatch(value):
        raise _refuse(
            field,
            value,
            "goes into an option string, which takes plain words only (ASCII letters, digits "
            "and _@+=:,./- : no spaces, quotes or shell characters)",
        )
    if value.startswith("-"):
        raise _refuse(field, value, "must not start with '-' (it would read as an option)")
    return value


def env_name(value: str, *, field: str) -> str:
    """An environment variable name: printable ASCII, no ``=``."""
    if not _PRINTABLE_ASCII.fullmatch(value) or "=" in value:
        raise _refuse(field, value, "must be printable ASCII characters other than '='")
    return value


def dns_label(value: str, *, field: str) -> str:
    """A container name: lower-case letters, digits and ``-``, at most 63, alphanumeric ends."""
    if not _DNS_LABEL.fullmatch(value):
        raise _refuse(
            field,
            value,
            "must be an RFC 1123 label (at most 63 lower-case letters, digits or '-', starting "
            "and ending with a letter or digit)",
        )
    return value


def image_ref(value: str, *, field: str) -> str:
    """A docker image reference; else ``UnsupportedError(reason="InvalidImageName")``."""
    match = _IMAGE.fullmatch(value)
    if match is None or len(match["name"]) > NAME_TOTAL_MAX:
        raise _refuse(
            field,
            value,
            "is not a valid image reference ([host[:port]/]name[:tag][@digest])",
            reason=IMAGE_REASON,
        )
    return value
