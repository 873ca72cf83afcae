"""``containerSettings.containerRunOptions``: built from vkgate's own options, checked after rendering.

Azure Batch passes the string to ``docker create`` as "additional options", and says no more
about how it splits it (a shell, whitespace, ``CommandLineToArgvW`` on Windows pools).  So no
quoting can be trusted to keep a pod's string one argument: an emptyDir ``mountPath:
"/:/host"`` used to render as ``--volume /:/host``, the pool node's root filesystem inside the
container.  Instead every value vkgate writes is a plain word (``translators.podstrings.
option_word``: the same argv under every splitter, ``shlex.quote`` leaves it unchanged), and
only the options of ``OPTIONS`` are written, each value checked by its rule:

=================  ==============================================================
``--volume``       an anonymous volume at an absolute, clean path without ``:``
``--tmpfs``        the same (no mount options)
``--workdir``      an absolute, clean path
``--entrypoint``   a plain word not starting with ``-``
``--cpus``         a decimal number (vkgate's own value only)
``--memory``       a number of bytes (vkgate's own value only)
``--gpus``         a count (vkgate's own value only)
=================  ==============================================================

The node's ``container_run_options`` (the operator's own text) follow, unchecked.

After rendering, ``check`` holds a template to the same: the rendered string must keep the
node's options at its end, and before them hold only plain words forming options of ``OPTIONS``
or options the node names in ``template_run_options`` (written ``--name=value`` or as a flag: a
bare word after them would be read as the image).  Resource options appear exactly as vkgate
computed them from the pod's limits: a template can neither hand a pod GPUs it did not ask for
nor drop its memory limit.  Anything else is a ``PolicyRefused`` naming the template, the option
and the setting.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Collection

from translators.base import PolicyRefused
from translators.podstrings import WORD, PodStringError, container_path, mount_path, option_word

FIELD = "containerSettings.containerRunOptions"
SETTING_OPTIONS = "backend.batch.template_run_options"
SETTING_NODE = "backend.batch.container_run_options"

_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
_COUNT = re.compile(r"[0-9]+")


def _path(value: str, field: str) -> None:
    container_path(value, field=field)


def _volume(value: str, field: str) -> None:
    mount_path(value, field=field)


def _matches(pattern: re.Pattern[str], what: str) -> Callable[[str, str], None]:
    def check(value: str, field: str) -> None:
        if not pattern.fullmatch(value):
            raise PodStringError(field, value, f"must be {what}")

    return check


def _word(value: str, field: str) -> None:
    option_word(value, field=field)


#: vkgate's own options and the rule each value follows (raises ``PodStringError``).
OPTIONS: dict[str, Callable[[str, str], None]] = {
    "--volume": _volume,
    "--tmpfs": _volume,
    "--workdir": _path,
    "--entrypoint": _word,
    "--cpus": _matches(_NUMBER, "a decimal number of cores"),
    "--memory": _matches(_COUNT, "a number of bytes"),
    "--gpus": _matches(_COUNT, "a number of GPUs"),
}
#: Options a template may only repeat with the value vkgate computed (they hand out resources).
RESOURCE_OPTIONS = frozenset({"--cpus", "--memory", "--gpus"})


class RunOptions:
    """The option words of one task, each value checked before it is added."""

    def __init__(self) -> None:
        self.words: list[str] = []

    def add(self, option: str, value: str, *, field: str) -> None:
        """Add ``option value``; ``PodStringError`` (an ``UnsupportedError``) naming ``field``
        when ``value`` does not follow the option's rule or is not a plain word."""
        option_word(value, field=field)
        OPTIONS[option](value, field)
        self.words += [option, value]

    def text(self, node_options: str = "") -> str:
        """The option string: the words (plain: quoting changes nothing), then the node's."""
        own = " ".join(shlex.quote(w) for w in self.words)
        return f"{own} {node_options}".strip()


def _pairs(text: str) -> list[tuple[str, str]]:
    """(option, value) pairs of a string ``RunOptions`` built (no node options)."""
    words = text.split()
    return list(zip(words[::2], words[1::2], strict=True))


def check(
    rendered: object,
    *,
    computed: str,
    node_options: str,
    allowed: Collection[str],
    template: str,
) -> None:
    """``PolicyRefused`` unless ``rendered`` (the template's containerRunOptions) holds only
    what the module docstring allows."""
    if rendered == computed or rendered is None:
        return

    def refuse(message: str, setting: str = SETTING_OPTIONS) -> PolicyRefused:
        return PolicyRefused(message, template=template, field=FIELD, setting=setting)

    if not isinstance(rendered, str):
        raise refuse(f"must be a string, the template made it {type(rendered).__name__}")
    body = rendered.strip()
    if node_options:
        if body != node_options and not body.endswith(" " + node_options):
            raise refuse(
                f"drops or moves the node's own options {node_options!r} (they end the string)",
                SETTING_NODE,
            )
        body = body[: len(body) - len(node_options)]
    words = body.split()
    for w in words:
        if not WORD.fullmatch(w):
            raise refuse(
                f"{w!r} is not a plain word (no quotes, spaces or shell characters: Batch does "
                "not say how it splits this string)",
                SETTING_NODE,
            )
    own = _pairs(computed_own(computed, node_options))
    i = 0
    seen: set[tuple[str, str]] = set()
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            raise refuse(
                f"{word!r} is not an option: docker create would read a bare word as the image"
            )
        name, eq, value = word.partition("=")
        if name in allowed:
            i += 1
            continue
        if name not in OPTIONS:
            raise refuse(f"option {name} is not one vkgate passes ({', '.join(OPTIONS)})")
        if not eq:
            if i + 1 >= len(words) or words[i + 1].startswith("-"):
                raise refuse(f"option {name} without a value")
            value = words[i + 1]
            i += 1
        if name in RESOURCE_OPTIONS and (name, value) not in own:
            raise refuse(f"{name} {value}: vkgate sets {name} only from the pod's limits")
        seen.add((name, value))
        try:
            OPTIONS[name](value, FIELD)
        except PodStringError as exc:
            raise refuse(f"{name} {value!r}: {exc.why}", SETTING_NODE) from None
        i += 1
    dropped = [f"{n} {v}" for n, v in own if n in RESOURCE_OPTIONS and (n, v) not in seen]
    if dropped:
        raise refuse(f"drops the pod's limits ({', '.join(dropped)})", SETTING_NODE)


def computed_own(computed: str, node_options: str) -> str:
    """vkgate's own words of a computed option string (the node's options cut off)."""
    if node_options and computed.endswith(node_options):
        return computed[: len(computed) - len(node_options)].strip()
    return computed
