"""Masking a pod's secret values in whatever vkgate prints: one function for every encoding.

A secret value rarely reaches a backend object as it was written.  The Nomad Variable holds a
Secret env value JSON-escaped (``"`` → ``\\"``, newline → ``\\n``: ``translators/nomad/
variables.py``), Batch delivers a Secret file base64-encoded and a Secret expanded into an
argument shell-quoted (``'`` → ``'"'"'``: ``translators/batch/spec.py``), a team template may pipe
a value through ``tojson``, ``b64encode`` or ``shquote``, and a render error quotes the rendered
line as a Python ``repr``.  A mask that looks for the raw value only misses all of those, so
``Masker`` masks each secret in every encoding it knows (docs/design/secrets.md, "What vkgate
prints"):

=======================  ==============================================================
raw                      the value itself (a file: its UTF-8 text, also with bad bytes
                         replaced, as templates see ``content``)
JSON                     ``json.dumps(v)[1:-1]``, non-ASCII kept and ``\\uXXXX``, and
                         JSON of JSON (a ``tojson`` string inside a ``tojson`` string)
HCL                      JSON escapes plus ``$${`` / ``%%{``
YAML                     double-quoted (PyYAML's escapes) and single-quoted (``''``)
shell                    inside single quotes (``'"'"'`` and ``'\\''``), inside double
                         quotes (a backslash before backslash, ``"``, ``$`` and backtick)
Python ``repr``          of each of the above, both quote styles (an error message quotes
                         a value, or a rendered line holding an escaped one, with ``!r``)
base64                   of the raw bytes and of each escape above (not the ``repr``): standard and
                         URL-safe alphabets, with and without padding, and *inside a
                         larger base64 blob* at each of the three byte alignments (the
                         characters that carry any bit of the value)
=======================  ==============================================================

Rules (``Masker.text``): a secret of at least ``MIN_SUBSTRING`` characters is masked wherever
an encoding of it occurs inside a string; a shorter one only where a whole string is one of its
encodings (masking every ``"ab"`` would mask unrelated text).  Every occurrence of every
encoding is found in the original string first and the union replaced, so overlapping
encodings leave nothing behind; where the mask itself and the text beside it form an encoding
again (a secret ``"=***"`` after ``--pw=``), masking repeats.  A cut excerpt (an error message
that quotes at most N characters and ends them with ``…``, or PyYAML's `` ... ``) may hold only
the start or the end of a secret: the part of an encoding that touches the cut is masked too.

The pieces that print use this module: ``vkgate render`` on stdout and stderr
(``gateway.templating.cli``) and the pod sync's Events, status messages and log lines for a
failed create or update (``gateway.pods.act``).  What the backends receive is never masked.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from translators.base import ResolvedPod

__all__ = [
    "MASK",
    "MIN_SUBSTRING",
    "Masker",
    "encodings",
    "mask_secrets",
    "masked_errors",
    "secret_values",
]

MASK = "*****"
#: Shorter secrets are masked only where a whole string is one of their encodings.
MIN_SUBSTRING = 4
#: What an excerpt that was cut ends (or starts) with.
CUT_MARKERS = ("…", " ... ")
#: How far from a cut marker a cut encoding is looked for (excerpts are 60 and 120 characters).
CUT_REACH = 256
#: Rounds of masking before a string that keeps forming an encoding with the mask is masked
#: whole.
_ROUNDS = 4

_B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
E = TypeVar("E", bound=BaseException)


def secret_values(pod: ResolvedPod) -> list[str | bytes]:
    """Every secret value a spec for ``pod`` may contain: Secret env values (and literals that
    expand one), the files of Secret volumes and every file marked secret (projected Secret
    items, service-account tokens) as bytes, registry passwords from imagePullSecrets."""
    values: list[str | bytes] = []
    for c in (*pod.init_containers, *pod.containers):
        values.extend(e.value for e in c.env if e.secret and e.value)
    for v in pod.volumes:
        values.extend(f.content for f in v.files if (f.secret or v.kind == "secret") and f.content)
    values.extend(c.password for c in pod.registry_credentials if c.password)
    return values


# --------------------------------------------------------------------------- encodings


def _yaml_double(text: str) -> str:
    dumped = yaml.dump(text, default_style='"', allow_unicode=True, width=2**31)
    return dumped[dumped.index('"') + 1 : dumped.rindex('"')]


def _repr_inner(text: str, quote: str) -> str:
    """``repr(text)`` without its quotes, as Python writes it inside a larger string quoted
    with ``quote`` (``'`` when the string holds both kinds)."""
    other = '"' if quote == "'" else "'"
    if quote == '"' and '"' in text:
        return repr(text)[1:-1]  # Python quotes with ' then: the other form
    inner = repr(text + other)[1:-1]
    return inner[: -len(repr(other)[1:-1])]


def _escapes(text: str) -> set[str]:
    """The escapes of a value as the backends and templates write it (and base64 it)."""
    json_u = json.dumps(text, ensure_ascii=False)[1:-1]
    json_a = json.dumps(text)[1:-1]
    return {
        text,
        json_u,
        json_a,
        json.dumps(json_u, ensure_ascii=False)[1:-1],
        json.dumps(json_a)[1:-1],
        json_u.replace("${", "$${").replace("%{", "%%{"),
        _yaml_double(text),
        text.replace("'", "''"),
        text.replace("'", "'\"'\"'"),
        text.replace("'", "'\\''"),
        re.sub(r'([\\"$`])', r"\\\1", text),
    }


def encodings(text: str) -> set[str]:
    """The text encodings of a secret (see the module docstring; base64 comes on top): each
    escape, and each escape as a ``repr`` quotes it (an error message quoting a rendered
    line that holds the escaped value)."""
    escapes = _escapes(text)
    out = escapes | {_repr_inner(e, q) for e in escapes for q in "'\""}
    out.discard("")
    return out


@dataclass(frozen=True)
class _Needle:
    """A string to find and how far the mask reaches past it on each side (the base64
    characters that carry some bits of the secret and some of its neighbours)."""

    text: str
    left: int = 0
    right: int = 0


def _base64_needles(data: bytes) -> Iterator[_Needle]:
    """``data``'s base64 whole (both alphabets, with and without padding) and inside a larger
    blob at each byte alignment: the characters every bit of which is ``data``'s, with the
    partial characters at either end as reach."""
    for alphabet in (base64.b64encode, base64.urlsafe_b64encode):
        whole = alphabet(data).decode()
        yield _Needle(whole)
        yield _Needle(whole.rstrip("="))
        for k in range(3):
            encoded = alphabet(b"\0" * k + data).decode()
            start, end = 8 * k, 8 * (k + len(data))
            first, last = -(-start // 6), end // 6  # chars [first, last) are all data
            if last - first < 2:
                continue
            yield _Needle(
                encoded[first:last],
                left=1 if start % 6 else 0,
                right=1 if end % 6 else 0,
            )


@dataclass
class Masker:
    """Masks every encoding of ``values`` in text and in specs (``text``, ``spec``,
    ``error``).  ``Masker(())`` masks nothing (``--show-secrets``)."""

    values: Iterable[str | bytes]
    mask: str = MASK
    _needles: list[_Needle] = field(init=False, default_factory=list)
    _whole: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        needles: dict[str, _Needle] = {}
        for value in self.values:
            raw = value if isinstance(value, bytes) else value.encode()
            texts = {value} if isinstance(value, str) else set()
            if isinstance(value, bytes):
                texts.add(value.decode("utf-8", errors="replace"))
                with contextlib.suppress(UnicodeDecodeError):
                    texts.add(value.decode("utf-8"))
            forms: set[str] = set()
            for t in texts:
                forms |= encodings(t)
            blobs = {raw, *(f.encode() for t in texts for f in _escapes(t))}  # not the reprs
            b64 = [n for blob in blobs for n in _base64_needles(blob)]
            self._whole |= forms | {n.text for n in b64 if n.left == n.right == 0}
            if len(value) < MIN_SUBSTRING:  # characters of a text, bytes of a file
                continue
            for n in [*(_Needle(f) for f in forms), *b64]:
                old = needles.get(n.text)
                if old is None or (n.left, n.right) > (old.left, old.right):
                    needles[n.text] = n
        self._whole.discard("")
        self._needles = sorted(needles.values(), key=lambda n: len(n.text), reverse=True)

    def __bool__(self) -> bool:
        return bool(self._whole)

    @classmethod
    def of(cls, *pods: ResolvedPod | None, extra: Iterable[str | bytes] = ()) -> Masker:
        """A masker for the secrets of ``pods`` (``None`` skipped) and ``extra`` values."""
        values = [v for p in pods if p is not None for v in secret_values(p)]
        return cls([*values, *extra])

    # -- masking ----------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every encoding of every secret replaced by the mask."""
        if not self._whole or not text:
            return text
        if text in self._whole:
            return self.mask
        for _ in range(_ROUNDS):
            spans = self._spans(text)
            if not spans:
                return text
            text = self._replace(text, spans)
            if text == self.mask:
                return text
        return self.mask if self._spans(text) else text

    def spec(self, node: Any) -> Any:
        """A copy of ``node`` (JSON: dicts, lists, scalars) with every string masked, keys
        too; two keys that mask alike stay apart (``*****``, ``*****~2``)."""
        if not self._whole:
            return node
        if isinstance(node, dict):
            out: dict[Any, Any] = {}
            for k, v in node.items():
                key = self.text(k) if isinstance(k, str) else k
                n = 1
                while key in out:
                    n += 1
                    key = f"{self.text(k)}~{n}"
                out[key] = self.spec(v)
            return out
        if isinstance(node, list):
            return [self.spec(v) for v in node]
        if isinstance(node, str):
            return self.text(node)
        return node

    def error(self, exc: E) -> E:
        """``exc`` with its message masked, in place (``args`` and a ``detail`` text), for
        the error paths that print it: an error may quote the rendered output."""
        if self._whole:
            exc.args = tuple(self.text(a) if isinstance(a, str) else a for a in exc.args)
            detail = getattr(exc, "detail", None)
            if isinstance(detail, str):
                with contextlib.suppress(AttributeError):
                    exc.detail = self.text(detail)  # type: ignore[attr-defined]
        return exc

    # -- the pieces ---------------------------------------------------------------------------

    def _spans(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for n in self._needles:
            start = text.find(n.text)
            while start >= 0:
                end = start + len(n.text)
                left = start
                for _ in range(n.left):
                    left -= left > 0 and text[left - 1] in _B64
                right = end
                for _ in range(n.right):
                    right += right < len(text) and text[right] in _B64
                spans.append((left, right))
                start = text.find(n.text, start + 1)
        spans.extend(self._cut_spans(text))
        return spans

    def _cut_spans(self, text: str) -> Iterator[tuple[int, int]]:
        """Where an excerpt was cut: the end of an encoding just before a marker, the start of
        one just after it (within ``CUT_REACH`` characters of the marker)."""
        for marker in CUT_MARKERS:
            at = text.find(marker)
            while at >= 0:
                before = text[max(0, at - CUT_REACH) : at]
                after = text[at + len(marker) : at + len(marker) + CUT_REACH]
                head = max((_ends_with_start(before, n.text) for n in self._needles), default=0)
                tail = max((_starts_with_end(after, n.text) for n in self._needles), default=0)
                if head:
                    yield at - head, at
                if tail:
                    yield at + len(marker), at + len(marker) + tail
                at = text.find(marker, at + 1)

    def _replace(self, text: str, spans: list[tuple[int, int]]) -> str:
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out, last = [], 0
        for start, end in merged:
            out += [text[last:start], self.mask]
            last = end
        out.append(text[last:])
        return "".join(out)


@contextlib.contextmanager
def masked_errors(*pods: ResolvedPod | None) -> Iterator[None]:
    """Mask the message of an error raised inside (``Masker.error`` with the secrets of
    ``pods``, built only when one is raised): for the callers that turn a create's or an
    update's error into an Event, a status message or a log line."""
    try:
        yield
    except Exception as exc:
        Masker.of(*pods).error(exc)
        raise


def _ends_with_start(text: str, needle: str) -> int:
    """The length of the longest proper start of ``needle`` that ``text`` ends with."""
    at = text.find(needle[0], max(0, len(text) - len(needle) + 1))
    while at >= 0:
        if needle.startswith(text[at:]):
            return len(text) - at
        at = text.find(needle[0], at + 1)
    return 0


def _starts_with_end(text: str, needle: str) -> int:
    """The length of the longest proper end of ``needle`` that ``text`` starts with."""
    at = needle.find(text[0], max(1, len(needle) - len(text))) if text else -1
    while at >= 0:
        if text.startswith(needle[at:]):
            return len(needle) - at
        at = needle.find(text[0], at + 1)
    return 0


def mask_secrets(spec: Any, pod: ResolvedPod, *, mask: str = MASK) -> Any:
    """A copy of ``spec`` with every encoding of every secret value of ``pod`` masked
    (``Masker.spec``)."""
    return Masker(secret_values(pod), mask=mask).spec(spec)
