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
   ``join``, ``format``, ``wordwrap``, ``sum``); the methods that grow a list or dict in place
   (``append``, ``extend``, ``update``…).  A single string/list may not exceed
   ``max_value`` characters/items, an integer ``max_int_bits`` bits, a range ``max_range``.
   **Text made from a value** is measured before it is made (``translators.render.textsize``):
   ``{{ value }}``, ``~``, ``%``, ``format``, ``join``, ``tojson`` and every filter that turns
   a list or mapping into text (``string``, ``pprint``, ``upper``, ``shquote``…).  Ten
   ``{% set a = [a, a, a, a] %}`` over one 1,000-character string are eleven small lists
   whose text is 4 GB; without the measure ``a|tojson`` allocated it inside one C call.
2. **A per-render allocation budget**: every string/list those operations and all filters build
   is charged; past ``budget`` the render stops.  This bounds memory even for a loop that keeps
   building fresh strings.
3. **Output size**: rendering streams and stops past ``max_output`` characters.
4. **Wall time**: every guarded operation checks the deadline; a pure loop that calls nothing
   is stopped by a watchdog that raises an exception inside the render thread
   (``PyThreadState_SetAsyncExc``) at the deadline.  A thread stuck inside one C call that
   holds the GIL — hashing or comparing a graph of shared tuples, ``{(t, t): 1}`` thirty
   levels deep, is hours of CPU in one call — cannot be stopped from inside the process: that
   is what the render worker (``translators.render.pool``) is for.

Every limit raises ``LimitExceeded``; the renderer turns it into a ``TranslationError`` naming
the template line.  The defaults are in ``RenderLimits`` and documented in templates/README.md.
``random`` and ``lipsum`` are removed so a render is a pure function of its context.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import jinja2
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from translators.render.textsize import json_size, str_size

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
    #: Values (objects, lists, scalars) of the parsed output: what the agent holds per spec.
    max_nodes: int = 200_000
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
_DEFAULT = RenderLimits()


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
        #: Every ``{{ … }}`` passes through ``finalize`` before ``str()``.
        self.finalize = self._finalize
        #: Called with (template name, Jinja's line map) as each template is compiled.
        self.on_compiled: Callable[[str, str], None] | None = None

    # -- accounting -------------------------------------------------------------------

    def check_size(self, size: int, what: str) -> None:
        guard = _GUARD.get()
        limits = guard.limits if guard is not None else self.limits
        if size > limits.max_value:
            shown = f"more than {size - 1}" if size == 64 * limits.max_value + 1 else size
            raise LimitExceeded(
                f"{what} would build {shown} characters/items (max {limits.max_value})"
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

    def check_text(self, value: Any, what: str) -> None:
        """Refuse to turn ``value`` into text (``str()``) when the text would be longer than
        ``max_value``: measured without building it (``translators.render.textsize``)."""
        if not _is_plain(value):
            self.check_size(_text_len(value), what)

    def _finalize(self, value: Any) -> Any:
        self.check_text(value, "printing a value")
        return value

    def charge_items(self, size: int) -> None:
        guard = _GUARD.get()
        if guard is not None:
            guard.charge(size)

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
        elif isinstance(owner, (list, dict, set)) and name in _GROWERS:
            added = _GROWERS[name](args, kwargs)
            __self.check_size(len(owner) + added, f"{type(owner).__name__}.{name}()")
            __self.charge_items(added)
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
        values = list(parts)
        self.check_size(sum(_text_len(p) for p in values), "'~'")
        return self.charge("".join(str(p) for p in values))

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
            elif name not in _STRUCTURAL:
                for value in (*args[skip:], *kwargs.values()):
                    self.check_text(value, f"filter {name}")
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
            if environment.on_compiled is not None:
                environment.on_compiled(str(namespace["name"]), str(namespace["debug_info"]))
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


def _is_plain(value: Any) -> bool:
    """A value whose ``str()`` is no longer than what it already holds."""
    return isinstance(value, (str, int, float)) or value is None


def _text_len(value: Any) -> int:
    """Characters of ``str(value)``, measured without building it (``_measure_limit``)."""
    if isinstance(value, str):
        return len(value)
    return str_size(value, limit=_measure_limit())


def _measure_limit() -> int:
    """Measures stop here: exact up to 64 x ``max_value`` (a message worth reading), and no
    walk longer than that."""
    guard = _GUARD.get()
    return 64 * (guard.limits if guard is not None else _DEFAULT).max_value


def _newlines(value: Any) -> int:
    return value.count("\n") if isinstance(value, str) else _text_len(value)


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
        + sum(_text_len(v) for v in values if not _is_plain(v) or _size(v) or _int(v))
        + sum(len(repr(v)) for v in values if isinstance(v, float))
    )


def _width(args: Any, kwargs: Mapping[str, Any], i: int, key: str, default: int = 0) -> int:
    return _int(_arg(args, kwargs, i, key, default))


def _replace_estimate(s: Any, old: Any, new: Any, count: Any) -> int:
    size = _text_len(s)
    old_s, new_n = (old if isinstance(old, str) else ""), _text_len(new)
    n = s.count(old_s) if isinstance(s, str) and old_s else size + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return size + n * new_n


_MATERIALIZE = frozenset({"join", "sum", "batch", "slice"})


def _materialize(value: Any) -> Any:
    """A generator/iterator argument as a list, so its size can be estimated before use."""
    if isinstance(value, (str, bytes, Mapping)) or hasattr(value, "__len__"):
        return value
    if hasattr(value, "__iter__"):
        return list(value)
    return value


def _join_estimate(sep: Any, items: Any) -> int:
    if isinstance(items, str) or not hasattr(items, "__len__") or not hasattr(items, "__iter__"):
        return _text_len(items) * (1 + _text_len(sep))
    if isinstance(items, Mapping):
        items = list(items)
    return _text_len(sep) * max(len(items) - 1, 0) + sum(_text_len(p) for p in items)


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


def _seq_len(value: Any) -> int:
    return len(value) if hasattr(value, "__len__") else 0


def _sum_estimate(a: Any, k: Mapping[str, Any]) -> int:
    start = _arg(a, k, 2, "start", 0)
    if not _size(start) or not hasattr(a[0], "__iter__"):
        return 0
    return _size(start) + sum(_size(x) for x in a[0])


def _tojson_estimate(a: Any, k: Mapping[str, Any]) -> int:
    value, indent = a[0], _arg(a, k, 1, "indent", None)
    if isinstance(value, str) and len(value) <= _FAST:
        return 0  # at most 6 characters each (``\u0001``): no walk for the common case
    if isinstance(value, (int, float)) or value is None:
        return 0
    return json_size(
        value, limit=_measure_limit(), indent=indent if isinstance(indent, int) else None
    )


#: A string this long cannot reach any ``max_value`` as JSON (6 characters each, at most).
_FAST = 4096


_FILTER_ESTIMATES: dict[str, Callable[[Any, Mapping[str, Any]], int]] = {
    "center": lambda a, k: max(_text_len(a[0]), _width(a, k, 1, "width", 80)),
    "indent": lambda a, k: (
        _text_len(a[0])
        + (_newlines(a[0]) + 1)
        * (_text_len(w) if isinstance(w := _arg(a, k, 1, "width", 4), str) else _int(w))
    ),
    "batch": lambda a, k: _seq_len(a[0]) + _width(a, k, 1, "linecount"),
    "slice": lambda a, k: _seq_len(a[0]) + 2 * _width(a, k, 1, "slices"),
    "replace": lambda a, k: _replace_estimate(
        a[0],
        _arg(a, k, 1, "old", ""),
        _arg(a, k, 2, "new", ""),
        _arg(a, k, 3, "count", None),
    ),
    "join": lambda a, k: _join_estimate(_arg(a, k, 1, "d", ""), a[0]),
    "format": lambda a, k: _format_estimate(
        a[0] if isinstance(a[0], str) else "", [a[0], *a[1:], *k.values()]
    ),
    "wordwrap": lambda a, k: (
        _text_len(a[0]) * (1 + _text_len(_arg(a, k, 3, "wrapstring", None) or "\n"))
    ),
    "sum": _sum_estimate,
    "tojson": _tojson_estimate,
}

#: Filters that never turn a list or mapping argument into text (the others' arguments are
#: measured first: ``a|string``, ``a|pprint``, ``a|upper``, ``a|shquote`` of a graph of shared
#: references would expand it inside one C call).
_STRUCTURAL = frozenset(
    {
        "abs", "attr", "batch", "count", "d", "default", "dictsort", "first", "float",
        "groupby", "int", "items", "last", "length", "list", "map", "max", "min", "reject",
        "rejectattr", "reverse", "round", "select", "selectattr", "slice", "sort", "unique",
    }
)  # fmt: skip

#: Methods that grow a list, dict or set in place: (args, kwargs) → items added at most.
_GROWERS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], int]] = {
    "append": lambda a, k: 1,
    "insert": lambda a, k: 1,
    "add": lambda a, k: 1,
    "setdefault": lambda a, k: 1,
    "extend": lambda a, k: sum(_seq_len(x) for x in a),
    "update": lambda a, k: sum(_seq_len(x) for x in a) + len(k),
}


# --------------------------------------------------------------------------- the watchdog


#: ``use_alarm()`` was called: renders on the main thread use ``SIGALRM`` for their deadline.
_ALARM = {"on": False, "armed": False}


def use_alarm() -> None:
    """Let renders on the main thread keep their deadline with ``SIGALRM`` instead of a watchdog
    thread (two thread starts per render, ~0.2 ms).  For a process that renders on its main
    thread and uses ``SIGALRM`` for nothing else: the render worker."""

    def expired(signum: int, frame: Any) -> None:
        if _ALARM["armed"]:
            raise RenderTimeout

    signal.signal(signal.SIGALRM, expired)
    _ALARM["on"] = True


def _run_with_alarm(func: Callable[[], T], limits: RenderLimits) -> T:
    token = _GUARD.set(_Guard(limits))
    _ALARM["armed"] = True
    signal.setitimer(signal.ITIMER_REAL, limits.timeout)
    try:
        return func()
    except RenderTimeout:
        exc = LimitExceeded(f"render time limit exceeded ({limits.timeout:g} s)")
        raise exc.with_traceback(sys.exc_info()[2]) from None
    finally:
        _ALARM["armed"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        _GUARD.reset(token)


def run_limited(func: Callable[[], T], limits: RenderLimits) -> T:
    """Run ``func`` under a fresh budget and deadline in a worker thread; at the deadline raise
    ``RenderTimeout`` inside it.  Returns the result or re-raises the error of ``func``.

    The worker runs in a copy of the caller's ``contextvars`` context, so context-local state
    (such as a trial template overlay) applies inside.  After ``use_alarm()``, a call on the
    main thread runs ``func`` right there, the deadline kept by ``SIGALRM``.
    """
    if _ALARM["on"] and threading.current_thread() is threading.main_thread():
        return _run_with_alarm(func, limits)
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
