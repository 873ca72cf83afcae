"""Log frame decoding and line shaping, byte by byte."""

from __future__ import annotations

import base64
import datetime as _dt
import json

from translators.nomad.logs import _Stamper, decode_frames, last_lines, rfc3339nano


def frame(data: bytes) -> bytes:
    return json.dumps({"File": "f", "Offset": 1, "Data": base64.b64encode(data).decode()}).encode()


def test_frames_split_at_any_byte_are_reassembled() -> None:
    stream = frame(b"one\n") + b"{}" + frame("zwei \u00fc\n".encode())
    for cut in range(1, len(stream)):
        buf = bytearray()
        got = []
        for part in (stream[:cut], stream[cut:]):
            buf += part
            got += decode_frames(buf)
        assert [g.get("Data") for g in got if g] == [
            base64.b64encode(b"one\n").decode(),
            base64.b64encode("zwei \u00fc\n".encode()).decode(),
        ]
        assert buf == bytearray()


def test_stamper_prefixes_each_line_once_across_chunks() -> None:
    t = _dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=_dt.UTC)
    stamp = _Stamper(lambda: t)
    out = stamp(b"a\nbb") + stamp(b"b\nc\n")
    prefix = b"2026-01-02T03:04:05.123456000Z "
    assert out == prefix + b"a\n" + prefix + b"bbb\n" + prefix + b"c\n"
    assert rfc3339nano(t) == "2026-01-02T03:04:05.123456000Z"


def test_last_lines() -> None:
    assert last_lines(b"1\n2\n3\n", 2) == b"2\n3\n"
    assert last_lines(b"1\n2\n3", 1) == b"3"
    assert last_lines(b"1\n", 0) == b""
