"""Kubernetes' syntax rules for the names vkgate puts on its Node: label keys and values,
taint keys, values and effects, resource names.

The API server answers a Node with a bad label with 422 at registration, long after the agent
started; checking the same rules when settings load turns that into one error naming the key.
The rules are apimachinery's ``IsQualifiedName``, ``IsValidLabelValue`` and
``IsDNS1123Subdomain`` (docs/design/config-bounds.md quotes them).  Each check returns None when
the value is valid, else the reason.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NAME_MAX = 63
SUBDOMAIN_MAX = 253
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def qualified_name_error(value: str) -> str | None:
    """Label keys, taint keys and resource names: ``[prefix/]name``, where the optional
    prefix is a DNS subdomain (≤ 253) and the name is ≤ 63 alphanumerics, ``-``, ``_``, ``.``
    with alphanumeric ends."""
    prefix, _, name = value.rpartition("/")
    if "/" in value and not prefix:
        return f"{value!r}: the prefix before '/' must not be empty"
    if prefix and (len(prefix) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(prefix)):
        return (
            f"{value!r}: the prefix {prefix!r} must be a lowercase DNS subdomain "
            f"(at most {SUBDOMAIN_MAX} characters)"
        )
    if not name:
        return f"{value!r}: the name part must not be empty"
    if len(name) > NAME_MAX or not _NAME.fullmatch(name):
        return (
            f"{value!r}: the name part must be at most {NAME_MAX} characters of A-Z, a-z, 0-9, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_value_error(value: str) -> str | None:
    """Label and taint values: empty, or ≤ 63 characters like a qualified name's name part."""
    if value == "":
        return None
    if len(value) > NAME_MAX or not _NAME.fullmatch(value):
        return (
            f"{value!r}: must be empty or at most {NAME_MAX} characters of A-Z, a-z, 0-9, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None
