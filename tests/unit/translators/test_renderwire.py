"""What a render worker may say to the agent (translators/render/wire.py): JSON data, never
something the agent runs.  A template that escapes the sandbox owns its worker; these tests
play that worker by answering the agent's request with bytes of their own, and require that
the agent runs nothing, fails the render with a clear error and replaces the worker
(docs/design/template-safety.md, "What a worker may say")."""

from __future__ import annotations

import base64
import datetime
import fcntl
import json
import math
import os
import pickle
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from translators.base import TranslationError
from translators.render import pool as pool_module
from translators.render import wire
from translators.render.engine import Renderer
from translators.render.pool import RenderPool
from translators.render.sandbox import RenderLimits

#: A compromised worker: reads the agent's first request, answers with the bytes of the file
#: it is given, then waits for the agent to close the pipe.
ROGUE = """
import os, struct, sys
answer = open(sys.argv[1], "rb").read()
(size,) = struct.unpack("!I", sys.stdin.buffer.read(4))
sys.stdin.buffer.read(size)
os.write(1, answer)
sys.stdin.buffer.read()
"""


class Rogues:
    """``subprocess.Popen`` as the pool calls it, starting a rogue worker in place of the next
    real one for each answer queued (then real workers again)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.answers: list[bytes] = []
        self.started = 0
        self.popen = subprocess.Popen

    def __call__(self, args: list[str], **kwargs: Any) -> Any:
        if args[1:3] == ["-m", "translators.render.worker"] and self.answers:
            path = self.tmp / f"answer-{self.started}"
            path.write_bytes(self.answers.pop(0))
            self.started += 1
            args = [args[0], "-c", ROGUE, str(path), *args[3:]]
        return self.popen(args, **kwargs)


@pytest.fixture
def rogues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rogues:
    rogues = Rogues(tmp_path)
    monkeypatch.setattr(subprocess, "Popen", rogues)  # as translators.render.pool calls it
    return rogues


@pytest.fixture
def pool() -> Iterator[RenderPool]:
    pool = RenderPool(workers=1)
    yield pool
    pool.close()


def framed(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


class MakeDirectory:
    """Unpickled, it makes a directory: code the worker chose, run in the agent."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def test_a_pickle_from_a_compromised_worker_runs_nothing_in_the_agent(
    rogues: Rogues, pool: RenderPool, tmp_path: Path
) -> None:
    """The answer the agent read with ``pickle.loads`` before: an ``ok`` whose value, once
    unpickled, has made a directory in the agent."""
    target = tmp_path / "made-by-the-worker"
    rogues.answers.append(framed(pickle.dumps(("ok", MakeDirectory(str(target)), False))))
    renderer = Renderer(overlay={"t/x.j2": "{{ 1 + 1 }}"}, pool=pool)
    with pytest.raises(TranslationError) as info:
        renderer.render_text("t/x.j2", {})
    assert not target.exists()
    assert info.value.template == "t/x.j2"
    assert "the render worker sent a frame that is not" in str(info.value)
    assert "the worker was replaced" in str(info.value)
    assert pool.replaced == 1
    assert renderer.render_text("t/x.j2", {}) == "2"  # a real worker now


def _message(**fields: Any) -> bytes:
    return framed(json.dumps(fields).encode())


_ERROR = {"detail": "x", "template": "t", "line": 1, "field": "", "retire": False, "peak_kib": 0}
_LIMITS = RenderLimits(max_output=1000, max_nodes=50)
_BOUNDS = wire.Bounds.of(max_output=_LIMITS.max_output, max_nodes=_LIMITS.max_nodes)

MALFORMED = {
    "over the frame bound (the body is never read)": (
        struct.pack("!I", _BOUNDS.frame + 1) + b"[" * 100,
        f"a frame of {_BOUNDS.frame + 1} bytes",
    ),
    "over the frame bound, by 4 GiB": (struct.pack("!I", 2**32 - 1), "a frame of 4294967295"),
    "not UTF-8": (framed(b'{"kind": "ok", "value": "\xff"}'), "a frame that is not UTF-8"),
    "not JSON": (framed(b'{"kind": "ok", '), "a frame that is not JSON"),
    "JSON, not a message": (framed(b"[1, 2]"), "a frame that is not a message"),
    "more values than the agent holds": (
        framed(b'{"kind":"ok","tagged":false,"retire":false,"value":[' + b"0," * 2000 + b"0]}"),
        "values (max",
    ),
    "nested past the parser": (framed(b"[" * 1200 + b"]" * 1200), "nests too deep"),
    "an error type the worker chose": (
        _message(kind="error", error="SystemExit", **_ERROR),
        "an error of type 'SystemExit', not one a worker may raise",
    ),
    "an error whose line is not a number": (
        _message(kind="error", error="TranslationError", **{**_ERROR, "line": "1; rm -rf"}),
        "line is not a line number",
    ),
    "a tag nobody defined": (
        _message(kind="ok", tagged=True, retire=False, value={"$": "object", "v": "os.system"}),
        "unknown tag 'object'",
    ),
    "a set of unhashable items": (
        _message(kind="ok", tagged=True, retire=False, value={"$": "set", "v": [[1]]}),
        "bad set tag",
    ),
    "text that is not a string": (
        _message(kind="ok", tagged=False, retire=False, value={"a": 1}),
        "an answer of type dict to 'text'",
    ),
    "an answer without its flags": (
        _message(kind="ok", value="2"),
        "a message of kind 'ok' whose tagged is not a bool",
    ),
    "a line map that is not one": (
        _message(kind="compiled", template="t/x.j2", debug_info="1=x"),
        "debug_info is not a line map",
    ),
    "a kind nobody defined": (_message(kind="exec", code="import os"), "of kind 'exec'"),
    "asking again for the environment it was sent": (
        _message(kind="need", key="someone else's"),
        "a need for another environment",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_answer_fails_the_render_and_replaces_the_worker(
    rogues: Rogues, pool: RenderPool, case: str
) -> None:
    answer, reason = MALFORMED[case]
    rogues.answers.append(answer)
    renderer = Renderer(overlay={"t/x.j2": "{{ 1 + 1 }}"}, pool=pool, limits=_LIMITS)
    with pytest.raises(TranslationError) as info:
        renderer.render_text("t/x.j2", {})
    message = str(info.value)
    assert message.startswith("t/x.j2: the render worker sent "), message
    assert reason in message
    assert message.endswith("refused, and the worker was replaced")
    assert "time limit" not in message  # refused as it came, not waited out
    assert pool.replaced == 1
    assert renderer.render_text("t/x.j2", {}) == "2"


def test_line_maps_past_their_bound_fail_the_render_and_replace_the_worker(
    rogues: Rogues, pool: RenderPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker may name every template it compiles; it may not make the agent keep more
    than ``_COMPILED_BYTES`` of them."""
    monkeypatch.setattr(pool_module, "_COMPILED_BYTES", 1000)
    maps = [
        _message(kind="compiled", template=f"t/{i}.j2", debug_info="&".join(["1=2"] * 30))
        for i in range(20)
    ]
    rogues.answers.append(b"".join(maps))
    renderer = Renderer(overlay={"t/x.j2": "{{ 1 + 1 }}"}, pool=pool)
    with pytest.raises(TranslationError, match="sent line maps of more than 1000 bytes"):
        renderer.render_text("t/x.j2", {})
    assert pool.replaced == 1
    assert renderer.render_text("t/x.j2", {}) == "2"


def test_the_agent_reads_a_bounded_part_of_a_workers_stacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dump pipe (``faulthandler``'s stacks, read before a stuck worker is killed) is the
    worker's too: a worker that fills it faster than the agent reads cannot keep the agent
    reading, nor make it hold more than ``_DUMP_BYTES`` (1 MiB; 256 KiB here, the most a pipe
    holds being 1 MiB)."""
    assert pool_module._DUMP_BYTES == 2**20
    monkeypatch.setattr(pool_module, "_DUMP_BYTES", 2**18)
    read, write = os.pipe()
    try:
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 2**20)
        os.set_blocking(read, False)
        os.write(write, b"x" * 2**20)
        worker = object.__new__(pool_module._Worker)
        worker._dump = read
        assert len(worker._drain_dump()) == 2**18
    finally:
        os.close(read)
        os.close(write)


def test_a_real_worker_over_the_agents_bounds_answers_with_an_error_and_is_kept(
    pool: RenderPool,
) -> None:
    """YAML aliases copied on the wire: 60 references to a 60-item list are 123 values for
    the sandbox's node count, 3,600 once sent; the worker says so instead of sending them."""
    source = "a: &a [" + ", ".join(["1"] * 60) + "]\nb: [" + ", ".join(["*a"] * 60) + "]\n"
    overlay = {"t/x.yaml.j2": source}
    limits = RenderLimits(max_nodes=150)
    local = Renderer(overlay=overlay, limits=limits, validate=False)
    assert len(local.render("t/x.yaml.j2", {})["b"]) == 60
    renderer = Renderer(overlay=overlay, pool=pool, limits=limits, validate=False)
    with pytest.raises(TranslationError, match=r"limit: output has \d+ values once YAML"):
        renderer.render("t/x.yaml.j2", {})
    assert pool.replaced == 0


YAML = """\
date: 2024-02-29
stamp: 2024-02-29 12:30:00.5+02:00
binary: !!binary aGVsbG8=
set: !!set {a, b}
pairs: !!pairs [{a: 1}, {a: 2}]
keys: {1: one, 2.5: two, true: yes, null: none, 2024-01-01: day}
nan: .nan
inf: -.inf
dollar: {"$": "tuple", "v": [1]}
text: "{{ s }}"
"""


def test_yaml_values_json_does_not_hold_arrive_as_an_in_process_render_makes_them(
    pool: RenderPool,
) -> None:
    ctx = {"s": "x"}
    local = Renderer(overlay={"t/y.yaml.j2": YAML}, validate=False).render("t/y.yaml.j2", ctx)
    remote = Renderer(overlay={"t/y.yaml.j2": YAML}, validate=False, pool=pool)
    got = remote.render("t/y.yaml.j2", ctx)
    assert _typed(got) == _typed(local)
    assert got["binary"] == b"hello" and got["set"] == {"a", "b"}
    assert got["pairs"] == [("a", 1), ("a", 2)] and math.isnan(got["nan"])


def test_a_context_json_does_not_hold_reaches_the_template_as_it_was(pool: RenderPool) -> None:
    source = "{{ t ~ '' }} {{ k[1] }} {{ b|length }} {{ d.year }}"
    ctx = {"t": (1, "a"), "k": {1: "one"}, "b": b"\x00\x01", "d": datetime.date(2024, 1, 2)}
    local = Renderer(overlay={"t/c.j2": source}).render_text("t/c.j2", ctx)
    assert Renderer(overlay={"t/c.j2": source}, pool=pool).render_text("t/c.j2", ctx) == local
    assert local == "(1, 'a') one 2 2024"


def test_a_context_that_is_not_data_is_refused_before_anything_is_sent(pool: RenderPool) -> None:
    renderer = Renderer(overlay={"t/x.j2": "{{ o }}"}, pool=pool)
    with pytest.raises(
        TranslationError,
        match="the render context is not data: cannot carry a value of type 'object'",
    ):
        renderer.render_text("t/x.j2", {"o": object()})
    assert pool.replaced == 0 and renderer.render_text("t/x.j2", {"o": 1}) == "1"


#: Every code point, lone surrogates included (JSON cannot escape them faithfully, so the
#: wire carries them as their 3-byte encoding: see translators/render/wire.py).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=200)


@settings(deadline=None, max_examples=150)
@given(s=ANY_TEXT)
@example(s="\ud83d" + "\ude00")  # two code points, not the one character they would make
@example(s="\x00\x1f\u2028\\ud800\ufffe é 😀")
def test_any_rendered_string_survives_the_round_trip_code_point_for_code_point(
    shared_pool: RenderPool, s: str
) -> None:
    renderer = Renderer(overlay={"t/s.j2": "{{ s }}"}, pool=shared_pool)
    got = renderer.render_text("t/s.j2", {"s": s})
    assert got == s and [ord(c) for c in got] == [ord(c) for c in s]
    assert got.encode("utf-8", "surrogatepass") == s.encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[RenderPool]:
    pool = RenderPool(workers=1)
    yield pool
    pool.close()


# --------------------------------------------------------------------------- the format

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    ANY_TEXT,
    st.binary(max_size=20),
    st.dates(),
    st.datetimes(timezones=st.just(datetime.UTC) | st.none()),
)
KEYS = st.one_of(st.none(), st.booleans(), st.integers(), ANY_TEXT, st.just("$"), st.dates())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(KEYS, inner, max_size=4),
        st.dictionaries(st.just("$") | st.just("v"), inner, max_size=2),
        st.frozensets(st.integers() | ANY_TEXT, max_size=3),
        st.sets(st.integers() | ANY_TEXT, max_size=3),
    ),
    max_leaves=20,
)


def _typed(value: Any) -> Any:
    """``value`` with every part's type beside it (``==`` takes 1 for True, (1,) for [1]),
    NaN as a string (it equals nothing)."""
    if isinstance(value, dict):
        return ("dict", sorted((repr(_typed(k)), _typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    if isinstance(value, set | frozenset):
        return (type(value).__name__, sorted(repr(_typed(v)) for v in value))
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


@settings(deadline=None, max_examples=300)
@given(value=VALUES)
@example(value={"\ud83d" + "\ude00": ("\ud800", {1: b"\xff"}, {"$": float("nan")})})
def test_every_value_the_wire_carries_reads_back_as_it_was(value: Any) -> None:
    text, tagged = wire.encode(value)
    body = wire.frame({"kind": "ok", "tagged": tagged, "retire": False}, value=text)[4:]
    bounds = wire.Bounds.of(max_output=2**20, max_nodes=10_000)
    reply = wire.read_reply(body, op="render", bounds=bounds)
    assert isinstance(reply, wire.Ok)
    assert _typed(reply.value) == _typed(value)


def test_plain_json_is_sent_as_it_is_and_a_dollar_key_cannot_forge_a_tag() -> None:
    assert wire.encode({"a": [1, "é", None]}) == ('{"a":[1,"\\u00e9",null]}', False)
    # a surrogate escape would be joined with its neighbour: written unescaped
    assert wire.encode(["\ud83d" + "\ude00", "😀"]) == ('["\ud83d\ude00","😀"]', False)
    text, tagged = wire.encode({"$": "bytes", "v": "aGk=", "t": (1,)})
    assert tagged and json.loads(text)["$"] == "dict"
    assert wire.decode(json.loads(text), tagged=True) == {"$": "bytes", "v": "aGk=", "t": (1,)}
    assert wire.decode({"$": "bytes", "v": "aGk="}, tagged=False) == {"$": "bytes", "v": "aGk="}
    assert wire.decode({"$": "bytes", "v": base64.b64encode(b"hi").decode()}, tagged=True) == b"hi"


def test_the_worker_and_pool_never_use_pickle() -> None:
    """What the agent reads from a worker, and the worker from the agent, is JSON only."""
    here = Path(pool_module.__file__).parent
    for name in ("pool.py", "worker.py", "wire.py"):
        source = (here / name).read_text()
        assert "import pickle" not in source and "pickle.loads" not in source, name
