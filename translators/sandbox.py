"""The Jinja sandbox with resource limits: templates are user input and must not hurt the agent.

Jinja's ``SandboxedEnvironment`` already blocks the attribute escapes (``__class__``,
``__globals__``, ``__subclasses__``, ``mro``, function internals): there are no file, process,
environment or network objects reachable from a template context made of plain data.  What it
does not bound is *cost*: ``"x" * 10**9``, ``10**10**8``, nested loops, ``"%999999999d"``.  This
module adds those bounds, in layers:

1. **Per-operation caps**, checked *before* the work is done, for every operation that can
   amplify its input: the intercepted operators ``*``, ``+``, ``%``, ``**``; ``~`` and block
   captures; ``range``; ``str.format``/``format_map``; str methods with a width
   (``center``/``ljust``/``rjust``/``zfill``/``expandtabs``/``replace``/``join``) and the
   builtin filters of the same kind (``center``, ``indent``, ``batch``, ``slice``, ``replace``,
   ``join``, ``format``, ``wordwrap``, ``sum``).  A single string/list may not exceed
   ``max_value`` characters/items, an integer ``max_int_bits`` bits, a range ``max_range``.
2. **A per-render allocation budget**: every string/list those operations and all filters build
   is charged; past ``budget`` the render stops.  This bounds memory even for a loop that keeps
   building fresh strings.
3. **Output size**: rendering streams and stops past ``max_output`` characters.
4. **Wall time**: every guarded operation checks the deadline; a pure loop that calls nothing
   is stopped by a watchdog that raises an exception inside the render thread
   (``PyThreadState_SetAsyncExc``) at the deadline.  A thread stuck inside one C call (none is
   reachable past the caps above) would be abandoned, not joined.

Every limit raises ``LimitExceeded``; the renderer turns it into a ``TranslationError`` naming
the template line.  The defaults are in ``RenderLimits`` and documented in templates/README.md.
``random`` and ``lipsum`` are removed so a render is a pure function of its context.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import jinja2
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RenderLimits:
    """Bounds of one render.  Sizes count characters (strings) or items (lists/dicts)."""

    #: Wall-clock seconds for one render (compile included).
    timeout: float = 2.0
    #: Characters of rendered output, and of the parsed output once YAML aliases are expanded.
    max_output: int = 4 * 2**20
    #: Nesting depth of the parsed output (lists and objects).
    max_depth: int = 64
    #: Characters/items of any single string or list a template builds.
    max_value: int = 4 * 2**20
    #: Characters/items all guarded operations of one render may build in total.
    budget: int = 64 * 2**20
    #: Items of one ``range()``.
    max_range: int = 10_000
    #: Bits of an integer built by ``*`` or ``**``.
    max_int_bits: int = 4096


class LimitExceeded(jinja2.TemplateRuntimeError):
    """A render hit one of the ``RenderLimits``."""


class RenderTimeout(BaseException):
    """Raised inside the render thread by the watchdog (BaseException: nothing swallows it)."""


class _Guard:
    """The running render's budget and deadline (one per render, found via a ContextVar)."""

    __slots__ = ("deadline", "limits", "spent")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.spent = 0
        self.deadline = time.monotonic() + limits.timeout

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"render time limit exceeded ({self.limits.timeout:g} s)")

    def charge(self, size: int) -> None:
        self.spent += size
        if self.spent > self.limits.budget:
            raise LimitExceeded(
                f"render allocation budget exceeded ({self.limits.budget} characters/items)"
            )


_GUARD: contextvars.ContextVar[_Guard | None] = contextvars.ContextVar("vkgate_guard", default=None)


def _size(value: Any) -> int:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    return 0


class LimitedSandbox(SandboxedEnvironment):
    """``SandboxedEnvironment`` + the caps, budget and deadline described in the module doc."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, *args: Any, limits: RenderLimits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits or RenderLimits()
        self.globals["range"] = self._range
        self.globals.pop("lipsum", None)
        self.filters.pop("random", None)
        self.template_class = _GuardedTemplate

    # -- accounting -------------------------------------------------------------------

    def check_size(self, size: int, what: str) -> None:
        guard = _GUARD.get()
        limits = guard.limits if guard is not None else self.limits
        if size > limits.max_value:
            raise LimitExceeded(
                f"{what} would build {size} characters/items (max {limits.max_value})"
            )
        if guard is not None:
            guard.tick()

    def charge(self, value: T) -> T:
        guard = _GUARD.get()
        if guard is not None:
            size = _size(value)
            if size:
                if size > guard.limits.max_value:
                    raise LimitExceeded(
                        f"a value of {size} characters/items exceeds max {guard.limits.max_value}"
                    )
                guard.charge(size)
            guard.tick()
        return value

    def _check_bits(self, bits: int, what: str) -> None:
        limit = (_GUARD.get() or self).limits.max_int_bits
        if bits > limit:
            raise LimitExceeded(f"{what} would build an integer of about {bits} bits (max {limit})")

    # -- hooks Jinja calls --------------------------------------------------------------

    def _range(self, *args: int) -> range:
        rng = range(*args)
        limit = (_GUARD.get() or self).limits.max_range
        if len(rng) > limit:
            raise LimitExceeded(f"range() of {len(rng)} items (max {limit})")
        return rng

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) and isinstance(n, int):
                    self.check_size(_size(seq) * max(n, 0), "'*'")
            if isinstance(left, int) and isinstance(right, int):
                self._check_bits(left.bit_length() + right.bit_length(), "'*'")
        elif operator == "+" and _size(left) and _size(right):
            self.check_size(_size(left) + _size(right), "'+'")
        elif operator == "%" and isinstance(left, str):
            self.check_size(_format_estimate(left, right), "'%' formatting")
        elif (
            operator == "**"
            and isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and right > 0
        ):
            self._check_bits(abs(left).bit_length() * right, "'**'")
        result = super().call_binop(context, operator, left, right)
        return self.charge(result)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str) and name in _STR_AMPLIFIERS:
            if name == "join" and args:
                args = (_materialize(args[0]), *args[1:])
            __self.check_size(_STR_AMPLIFIERS[name](owner, args, kwargs), f"str.{name}()")
        return __self.charge(super().call(__context, __obj, *args, **kwargs))

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        return self.charge(value) if isinstance(argument, slice) else value

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt: str = value.__self__

        def guarded(*args: Any, **kwargs: Any) -> str:
            values = list(args) + list(kwargs.values())
            if args and isinstance(args[0], Mapping):
                values += list(args[0].values())
            self.check_size(_format_estimate(fmt, values), "str.format()")
            return self.charge(wrapper(*args, **kwargs))

        return guarded

    def concat(self, parts: Iterable[Any]) -> str:
        """Block captures (``{% set x %}…``), macro and call bodies."""
        items = list(parts)
        self.check_size(sum(len(str(p)) for p in items), "block capture")
        return self.charge("".join(items))

    def str_join(self, parts: Iterable[Any]) -> str:
        """The ``~`` operator."""
        items = [str(p) for p in parts]
        self.check_size(sum(len(p) for p in items), "'~'")
        return self.charge("".join(items))

    def guard_filters(self) -> None:
        """Wrap every filter (call after adding custom ones): size pre-checks for the
        amplifying builtins, deadline and budget for all."""
        for name, func in list(self.filters.items()):
            if not getattr(func, "_vkgate_guarded", False):
                self.filters[name] = self._guard_filter(name, func)

    def _guard_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        estimate = _FILTER_ESTIMATES.get(name)
        skip = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

        @functools.wraps(func)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if name in _MATERIALIZE and len(args) > skip:
                args = (*args[:skip], _materialize(args[skip]), *args[skip + 1 :])
            if estimate is not None:
                self.check_size(estimate(args[skip:], kwargs), f"filter {name}")
            return self.charge(func(*args, **kwargs))

        guarded._vkgate_guarded = True  # type: ignore[attr-defined]
        return guarded


class _GuardedTemplate(jinja2.Template):
    """Routes the ``~`` operator of compiled templates through ``LimitedSandbox.str_join``."""

    @classmethod
    def _from_namespace(
        cls,
        environment: jinja2.Environment,
        namespace: Any,
        globals: Any,
    ) -> jinja2.Template:
        if isinstance(environment, LimitedSandbox):
            namespace["str_join"] = environment.str_join
        return super()._from_namespace(environment, namespace, globals)


# --------------------------------------------------------------------------- estimates

_NUMBERS = re.compile(r"\d+")


def _arg(
    args: tuple[Any, ...] | list[Any], kwargs: Mapping[str, Any], i: int, key: str, default: Any
) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(key, default)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _format_estimate(fmt: str, values: Any) -> int:
    """Upper bound of a %/format result: widths written in the format string or passed as
    ``*``/nested arguments, per field, plus the text of every value."""
    if not isinstance(values, (list, tuple)):
        values = list(values.values()) if isinstance(values, Mapping) else [values]
    fields = fmt.count("%") + fmt.count("{") + 1
    widest = max((int(n) for n in _NUMBERS.findall(fmt) if len(n) < 12), default=0)
    if any(len(n) >= 12 for n in _NUMBERS.findall(fmt)):
        widest = 10**12
    int_args = max((_int(v) for v in values), default=0)
    return (
        len(fmt)
        + fields * max(widest, int_args if "*" in fmt or "{" in fmt else 0)
        + sum(len(str(v)) for v in values if _size(v) or isinstance(v, (int, float)))
    )


def _width(args: Any, kwargs: Mapping[str, Any], i: int, key: str, default: int = 0) -> int:
    return _int(_arg(args, kwargs, i, key, default))


def _replace_estimate(s: str, old: Any, new: Any, count: Any) -> int:
    old_s, new_s = str(old), str(new)
    n = s.count(old_s) if old_s else len(s) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * len(new_s)


_MATERIALIZE = frozenset({"join", "sum", "batch", "slice"})


def _materialize(value: Any) -> Any:
    """A generator/iterator argument as a list, so its size can be estimated before use."""
    if isinstance(value, (str, bytes, Mapping)) or hasattr(value, "__len__"):
        return value
    if hasattr(value, "__iter__"):
        return list(value)
    return value


def _join_estimate(sep: Any, items: Any) -> int:
    if not hasattr(items, "__len__") or not hasattr(items, "__iter__"):
        return 0
    parts = list(items)
    return len(str(sep)) * max(len(parts) - 1, 0) + sum(len(str(p)) for p in parts)


_STR_AMPLIFIERS: dict[str, Callable[[str, tuple[Any, ...], dict[str, Any]], int]] = {
    "center": lambda s, a, k: max(len(s), _width(a, k, 0, "width")),
    "ljust": lambda s, a, k: max(len(s), _width(a, k, 0, "width")),
    "rjust": lambda s, a, k: max(len(s), _width(a, k, 0, "width")),
    "zfill": lambda s, a, k: max(len(s), _width(a, k, 0, "width")),
    "expandtabs": lambda s, a, k: len(s) * max(_width(a, k, 0, "tabsize", 8), 1),
    "replace": lambda s, a, k: _replace_estimate(
        s, _arg(a, k, 0, "old", ""), _arg(a, k, 1, "new", ""), _arg(a, k, 2, "count", -1)
    ),
    "join": lambda s, a, k: _join_estimate(s, _arg(a, k, 0, "iterable", ())),
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _seq_len(value: Any) -> int:
    return len(value) if hasattr(value, "__len__") else 0


def _sum_estimate(a: Any, k: Mapping[str, Any]) -> int:
    start = _arg(a, k, 2, "start", 0)
    if not _size(start) or not hasattr(a[0], "__iter__"):
        return 0
    return _size(start) + sum(_size(x) for x in a[0])


_FILTER_ESTIMATES: dict[str, Callable[[Any, Mapping[str, Any]], int]] = {
    "center": lambda a, k: max(len(_text(a[0])), _width(a, k, 1, "width", 80)),
    "indent": lambda a, k: (
        len(_text(a[0]))
        + (_text(a[0]).count("\n") + 1)
        * (len(w) if isinstance(w := _arg(a, k, 1, "width", 4), str) else _int(w))
    ),
    "batch": lambda a, k: _seq_len(a[0]) + _width(a, k, 1, "linecount"),
    "slice": lambda a, k: _seq_len(a[0]) + 2 * _width(a, k, 1, "slices"),
    "replace": lambda a, k: _replace_estimate(
        _text(a[0]),
        _arg(a, k, 1, "old", ""),
        _arg(a, k, 2, "new", ""),
        _arg(a, k, 3, "count", None),
    ),
    "join": lambda a, k: _join_estimate(_arg(a, k, 1, "d", ""), a[0]),
    "format": lambda a, k: _format_estimate(_text(a[0]), list(a[1:]) + list(k.values())),
    "wordwrap": lambda a, k: (
        len(_text(a[0])) * (1 + len(_text(_arg(a, k, 3, "wrapstring", None) or "\n")))
    ),
    "sum": _sum_estimate,
}


# --------------------------------------------------------------------------- the watchdog


def run_limited(func: Callable[[], T], limits: RenderLimits) -> T:
    """Run ``func`` under a fresh budget and deadline in a worker thread; at the deadline raise
    ``RenderTimeout`` inside it.  Returns the result or re-raises the error of ``func``.

    The worker runs in a copy of the caller's ``contextvars`` context, so context-local state
    (such as a trial template overlay) applies inside.
    """
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}
    lock = threading.Lock()
    finished = threading.Event()

    def body() -> T:
        _GUARD.set(_Guard(limits))
        try:
            return func()
        except RenderTimeout:
            # Keep the traceback: its template frames tell where the render was stuck.
            exc = LimitExceeded(f"render time limit exceeded ({limits.timeout:g} s)")
            raise exc.with_traceback(sys.exc_info()[2]) from None

    def target() -> None:
        try:
            box["value"] = ctx.run(body)
            with lock:
                finished.set()
        except BaseException as exc:
            with lock:
                finished.set()
            box["error"] = exc

    worker = threading.Thread(target=target, name="vkgate-render", daemon=True)
    worker.start()
    worker.join(limits.timeout)
    if worker.is_alive():
        with lock:
            if not finished.is_set() and worker.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(worker.ident), ctypes.py_object(RenderTimeout)
                )
        worker.join(1.0)
    if "error" in box:
        error = box["error"]
        if isinstance(error, RenderTimeout):
            raise LimitExceeded(f"render time limit exceeded ({limits.timeout:g} s)") from None
        raise error.with_traceback(error.__traceback__)
    if "value" not in box:
        raise LimitExceeded(
            f"render time limit exceeded ({limits.timeout:g} s; the render thread was abandoned)"
        )
    value: T = box["value"]
    return value
