"""Where a rendered backend object carries a pod's Secret value that the pod did not put there.

A template sees the pod's resolved Secret values (env values, volume file contents: the context
of docs/design/secrets.md); a backend that cannot keep them secret refuses the pod that asks it
to (``secret_env = "reject"``), and its policy step then asks this module whether a template put
one into the rendered object anyway.

A Secret value counts as *placed by the template* when it appears, as text or as base64, in a
string of the rendered object but in none of the strings vkgate itself computed for it (the
"public" strings: the pod's own arguments, names, literal env values).  So a pod that writes
the same text into its own arguments is not refused for it; a template that copies a Secret
into ``environment``, a label or a file is.  Values shorter than ``MIN_LENGTH`` are not
searched: they would match unrelated text.

This is a check on what a template rendered, not a wall against a template author set on
smuggling a value out (a template may transform it first); that wall is who may write
templates (docs/design/template-safety.md).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from typing import Any

MIN_LENGTH = 4


def strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string of a JSON value (keys included) with its path (``a.b[0]``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(key, str):
                yield sub, key
            yield from strings(value, sub)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from strings(value, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def encodings(values: Iterable[str | bytes]) -> list[str]:
    """Each value as text and as base64 (the two forms a template is handed), long enough to
    search for, longest first."""
    out: set[str] = set()
    for value in values:
        raw = value if isinstance(value, bytes) else value.encode()
        out.add(raw.decode("utf-8", errors="replace"))
        out.add(base64.b64encode(raw).decode())
    return sorted((v for v in out if len(v) >= MIN_LENGTH), key=len, reverse=True)


def placed(rendered: Any, secrets: Iterable[str | bytes], *, public: Any) -> str | None:
    """The path of the first string of ``rendered`` that carries one of ``secrets`` (text or
    base64) that no string of ``public`` carries; None when there is none."""
    wanted = encodings(secrets)
    if not wanted:
        return None
    known = [text for _, text in strings(public)]
    for path, text in strings(rendered):
        for secret in wanted:
            if secret in text and not any(secret in k for k in known):
                return path or "(the whole object)"
    return None
