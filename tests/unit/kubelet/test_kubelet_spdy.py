"""SPDY/3.1 codec and session: frames round-trip, headers compress with the SPDY/3 dictionary
in one context per direction, streams multiplex, flow control, PING echo, GOAWAY."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubelet_helpers import SpdyTestClient, socket_pair

from gateway.kubelet.streams import spdy

# --------------------------------------------------------------------------- dictionary


def test_dictionary_is_the_spdy3_one() -> None:
    # 1423 bytes; its zlib dictionary id (Adler-32) is the one SPDY/3 peers put on the wire.
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == 0xE3C6A7C2
    assert spdy.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.DICTIONARY.endswith(b"charset=utf-8charset=iso-8859-1,utf-,*,enq=0.")


def test_header_block_uses_dictionary_and_sync_flush() -> None:
    c = spdy.HeaderCompressor()
    block = c.compress({"streamtype": ["error"]})
    cmf, flg = block[0], block[1]
    assert flg & 0x20, "FDICT set: the preset dictionary is used"
    assert struct.unpack("!I", block[2:6])[0] == zlib.adler32(spdy.DICTIONARY)
    assert block.endswith(b"\x00\x00\xff\xff"), "each block ends with a sync flush"
    assert cmf & 0x0F == 8


def test_header_contexts_are_per_direction_and_in_order() -> None:
    c = spdy.HeaderCompressor()
    d = spdy.HeaderDecompressor()
    blocks = [c.compress({"streamtype": [t], "port": ["80"]}) for t in ("error", "stdout", "stdin")]
    # later blocks reference earlier ones: they only decode in wire order, with the same context
    assert len(blocks[2]) < len(blocks[0])
    assert [d.decompress(b)["streamtype"] for b in blocks] == [["error"], ["stdout"], ["stdin"]]
    with pytest.raises(spdy.SpdyProtocolError):
        spdy.HeaderDecompressor().decompress(blocks[2][2:])


def test_header_block_rejects_bad_names() -> None:
    raw = spdy.encode_header_block({"ok": ["1"]}).replace(b"ok", b"OK")
    with pytest.raises(spdy.SpdyProtocolError, match="invalid header name"):
        spdy.decode_header_block(raw)
    dup = struct.pack("!I", 2) + (struct.pack("!I", 1) + b"a" + struct.pack("!I", 1) + b"x") * 2
    with pytest.raises(spdy.SpdyProtocolError, match="duplicate"):
        spdy.decode_header_block(dup)
    with pytest.raises(spdy.SpdyProtocolError, match="truncated"):
        spdy.decode_header_block(struct.pack("!I", 1) + struct.pack("!I", 9) + b"ab")


def test_multi_valued_headers_are_nul_joined() -> None:
    raw = spdy.encode_header_block({"x-stream-protocol-version": ["v4.channel.k8s.io", "v3"]})
    assert b"v4.channel.k8s.io\x00v3" in raw
    assert spdy.decode_header_block(raw) == {
        "x-stream-protocol-version": ["v4.channel.k8s.io", "v3"]
    }


# --------------------------------------------------------------------------- frames

ALL_FRAMES: list[spdy.Frame] = [
    spdy.DataFrame(1, b"hello", fin=False),
    spdy.DataFrame(3, b"", fin=True),
    spdy.SynStream(1, {"streamtype": ["error"]}, associated_to=0, priority=3, slot=0),
    spdy.SynStream(5, {"streamtype": ["stdin"]}, fin=True, unidirectional=True),
    spdy.SynReply(1, {}),
    spdy.SynReply(3, {"status": ["200"]}, fin=True),
    spdy.HeadersFrame(1, {"a": ["b"]}),
    spdy.RstStream(7, spdy.RstStatus.CANCEL),
    spdy.Settings(((0, spdy.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20), (1, 4, 100)), clear=True),
    spdy.Ping(1),
    spdy.GoAway(9, spdy.GoAwayStatus.OK),
    spdy.WindowUpdate(0, 65536),
    spdy.WindowUpdate(3, 1),
]


def test_every_frame_type_round_trips_in_one_byte_stream() -> None:
    c = spdy.HeaderCompressor()
    wire = b"".join(spdy.encode_frame(f, c) for f in ALL_FRAMES)
    assert spdy.FrameDecoder().feed(wire) == ALL_FRAMES


def test_decoder_is_incremental_byte_by_byte() -> None:
    c = spdy.HeaderCompressor()
    wire = b"".join(spdy.encode_frame(f, c) for f in ALL_FRAMES)
    d = spdy.FrameDecoder()
    got: list[spdy.Frame] = []
    for i in range(len(wire)):
        got += d.feed(wire[i : i + 1])
    assert got == ALL_FRAMES


def test_known_wire_bytes() -> None:
    c = spdy.HeaderCompressor()
    assert spdy.encode_frame(spdy.Ping(1), c) == bytes.fromhex(
        "8003000600000004 00000001".replace(" ", "")
    )
    assert spdy.encode_frame(spdy.DataFrame(3, b"ab", fin=True), c) == bytes.fromhex(
        "00000003010000026162"
    )
    assert spdy.encode_frame(spdy.GoAway(5, 0), c) == bytes.fromhex(
        "800300070000000800000005 00000000".replace(" ", "")
    )
    assert spdy.encode_frame(spdy.WindowUpdate(1, 1000), c)[8:] == struct.pack("!II", 1, 1000)


def test_unknown_control_frames_are_skipped_and_bad_version_rejected() -> None:
    noop = struct.pack("!HHI", 0x8003, 5, 0)  # NOOP (SPDY/2), unknown in SPDY/3
    ping = spdy.encode_frame(spdy.Ping(3), spdy.HeaderCompressor())
    assert spdy.FrameDecoder().feed(noop + ping) == [spdy.Ping(3)]
    v2 = struct.pack("!HHI", 0x8002, 6, 4) + b"\x00\x00\x00\x01"
    with pytest.raises(spdy.SpdyProtocolError, match="version 2"):
        spdy.FrameDecoder().feed(v2)


header_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=20)
header_values = st.lists(
    st.text(min_size=0, max_size=30).filter(lambda v: "\x00" not in v), min_size=1, max_size=3
)
headers = st.dictionaries(header_names, header_values, max_size=6)
stream_ids = st.integers(min_value=1, max_value=0x7FFFFFFF)
frames = st.one_of(
    st.builds(spdy.DataFrame, stream_ids, st.binary(max_size=300), st.booleans()),
    st.builds(
        spdy.SynStream,
        stream_ids,
        headers,
        associated_to=st.integers(0, 0x7FFFFFFF),
        priority=st.integers(0, 7),
        slot=st.integers(0, 255),
        fin=st.booleans(),
        unidirectional=st.booleans(),
    ),
    st.builds(spdy.SynReply, stream_ids, headers, fin=st.booleans()),
    st.builds(spdy.HeadersFrame, stream_ids, headers, fin=st.booleans()),
    st.builds(spdy.RstStream, stream_ids, st.integers(1, 11)),
    st.builds(
        spdy.Settings,
        st.lists(
            st.tuples(st.integers(0, 255), st.integers(0, 0xFFFFFF), st.integers(0, 2**32 - 1)),
            max_size=4,
        ).map(tuple),
        clear=st.booleans(),
    ),
    st.builds(spdy.Ping, st.integers(0, 2**32 - 1)),
    st.builds(spdy.GoAway, st.integers(0, 0x7FFFFFFF), st.integers(0, 2)),
    st.builds(spdy.WindowUpdate, st.integers(0, 0x7FFFFFFF), st.integers(1, 0x7FFFFFFF)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(frames, max_size=12), st.integers(1, 50))
def test_any_frame_sequence_round_trips_through_any_chunking(
    seq: list[spdy.Frame], chunk: int
) -> None:
    c = spdy.HeaderCompressor()
    wire = b"".join(spdy.encode_frame(f, c) for f in seq)
    d = spdy.FrameDecoder()
    got: list[spdy.Frame] = []
    for i in range(0, len(wire), chunk):
        got += d.feed(wire[i : i + chunk])
    assert got == seq


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_crashes_the_decoder(data: bytes) -> None:
    with contextlib.suppress(spdy.SpdyProtocolError):
        spdy.FrameDecoder().feed(data)


# --------------------------------------------------------------------------- session


_open_writers: list[asyncio.StreamWriter] = []


@pytest.fixture(autouse=True)
async def _close_sockets() -> AsyncIterator[None]:
    yield
    while _open_writers:
        w = _open_writers.pop()
        w.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(w.wait_closed(), 1)


async def _session(**kw: object) -> tuple[spdy.SpdySession, SpdyTestClient, asyncio.Task[None]]:
    (sr, sw), (cr, cw) = await socket_pair()
    _open_writers.extend([sw, cw])
    session = spdy.SpdySession(sr, sw, **kw)  # type: ignore[arg-type]
    task = asyncio.create_task(session.run())
    return session, SpdyTestClient(cr, cw), task


async def test_streams_are_accepted_replied_and_interleaved() -> None:
    session, client, task = await _session()
    a = await client.open("stdout")
    b = await client.open("stdin")
    s1 = await session.accept()
    s2 = await session.accept()
    assert s1 is not None and s2 is not None
    assert (s1.id, s1.header("streamType"), s2.header("streamtype")) == (a, "stdout", "stdin")
    await client.until(lambda: client.replies == {a, b})
    await client.write(b, b"in-1")
    await s1.write(b"out-1")
    await client.write(b, b"in-2", fin=True)
    await s1.write(b"out-2")
    await s1.close()
    assert await s2.read() == b"in-1"
    assert await s2.read() == b"in-2"
    assert await s2.read() == b""
    await client.until(lambda: a in client.fin)
    assert bytes(client.data[a]) == b"out-1out-2"
    await session.close()
    await task


async def test_ping_from_client_is_echoed() -> None:
    session, client, task = await _session()
    await client.send(spdy.Ping(7))
    await client.until(lambda: 7 in client.pings)
    await session.close()
    await task


async def test_even_ping_ids_are_ours_and_not_echoed() -> None:
    session, client, task = await _session()
    await client.send(spdy.Ping(2))
    await client.send(spdy.Ping(9))
    await client.until(lambda: 9 in client.pings)
    assert 2 not in client.pings
    await session.close()
    await task


async def test_goaway_from_client_ends_accept_and_refuses_new_streams() -> None:
    session, client, task = await _session()
    await client.send(spdy.GoAway(0))
    assert await session.accept() is None
    sid = await client.open("stdout")
    await client.until(lambda: sid in client.resets)
    assert client.resets[sid] == spdy.RstStatus.REFUSED_STREAM
    await session.close()
    await task


async def test_session_close_sends_goaway_with_last_stream() -> None:
    session, client, task = await _session()
    sid = await client.open("error")
    assert await session.accept() is not None
    await session.close()
    await client.until(lambda: client.goaway is not None)
    assert client.goaway == spdy.GoAway(sid, spdy.GoAwayStatus.OK)
    await task


async def test_protocol_error_answers_goaway_protocol_error() -> None:
    session, client, task = await _session()
    client.writer.write(struct.pack("!HHI", 0x8002, 6, 4) + b"\x00\x00\x00\x01")
    await client.until(lambda: client.goaway is not None)
    assert client.goaway is not None and client.goaway.status == spdy.GoAwayStatus.PROTOCOL_ERROR
    await task
    assert session.closed.is_set()


async def test_invalid_stream_ids_are_reset() -> None:
    session, client, task = await _session()
    await client.send(spdy.SynStream(2, {"streamtype": ["x"]}))  # even id: server-side space
    await client.send(spdy.DataFrame(41, b"x"))  # never opened
    await client.until(lambda: {2, 41} <= client.resets.keys())
    assert client.resets == {2: spdy.RstStatus.PROTOCOL_ERROR, 41: spdy.RstStatus.INVALID_STREAM}
    await session.close()
    await task


async def test_client_reset_ends_reads_and_writes() -> None:
    session, client, task = await _session()
    sid = await client.open("stdout")
    st_ = await session.accept()
    assert st_ is not None
    await client.send(spdy.RstStream(sid, spdy.RstStatus.CANCEL))
    assert await st_.read() == b""
    with pytest.raises(spdy.StreamReset):
        await st_.write(b"x")
    await session.close()
    await task


async def test_disconnect_resets_open_streams_and_ends_accept() -> None:
    session, client, task = await _session()
    await client.open("stdin")
    st_ = await session.accept()
    assert st_ is not None
    client.writer.close()
    await task
    assert await st_.read() == b""
    assert await session.accept() is None


async def test_no_window_enforcement_for_peers_without_flow_control() -> None:
    # Go's spdystream never sends WINDOW_UPDATE: 200 KiB must still go out.
    session, client, task = await _session()
    sid = await client.open("stdout")
    st_ = await session.accept()
    assert st_ is not None
    await st_.write(b"x" * 200_000)
    await st_.close()
    await client.until(lambda: sid in client.fin)
    assert len(client.data[sid]) == 200_000
    assert all(
        len(f.data) <= spdy.MAX_DATA_CHUNK for f in client.frames if isinstance(f, spdy.DataFrame)
    )
    await session.close()
    await task


async def test_window_is_enforced_once_the_peer_does_flow_control() -> None:
    session, client, task = await _session()
    sid = await client.open("stdout")
    st_ = await session.accept()
    assert st_ is not None
    await client.send(spdy.Settings(((0, spdy.SETTINGS_INITIAL_WINDOW_SIZE, 1000),)))
    await client.until(lambda: sid in client.replies)
    for _ in range(50):
        if session.peer_flow_control:
            break
        await asyncio.sleep(0.01)
    writer = asyncio.create_task(st_.write(b"y" * 2500))
    await client.until(lambda: len(client.data[sid]) >= 1000)
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):
        await client.read_some(0.1)
    assert len(client.data[sid]) == 1000 and not writer.done()
    await client.send(spdy.WindowUpdate(sid, 1000))
    await client.until(lambda: len(client.data[sid]) >= 2000)
    await client.send(spdy.WindowUpdate(sid, 5000))
    await writer
    await client.until(lambda: len(client.data[sid]) == 2500)
    await session.close()
    await task


async def test_consumed_data_is_acknowledged_with_window_updates() -> None:
    session, client, task = await _session()
    sid = await client.open("stdin")
    st_ = await session.accept()
    assert st_ is not None
    for _ in range(3):
        await client.write(sid, b"z" * 16384)
    got = 0
    while got < 3 * 16384:
        got += len(await st_.read())
    await client.until(lambda: any(w.stream_id == sid for w in client.window_updates))
    await client.until(lambda: any(w.stream_id == 0 for w in client.window_updates))
    acked = sum(w.delta for w in client.window_updates if w.stream_id == sid)
    assert acked >= spdy.DEFAULT_WINDOW // 2
    await session.close()
    await task


async def test_slow_reader_pauses_socket_reads() -> None:
    session, client, task = await _session()
    sid = await client.open("stdin")
    st_ = await session.accept()
    assert st_ is not None
    chunk = b"q" * 60000
    # the reader is paused once HIGH_WATER bytes are buffered; later frames wait in the socket

    async def send_all() -> None:
        for _ in range(40):
            await client.write(sid, chunk)

    sender = asyncio.create_task(send_all())
    await asyncio.sleep(0.3)
    assert not sender.done(), "the socket is full: the sender waits for us"
    assert spdy.HIGH_WATER < st_._buffered <= spdy.HIGH_WATER + len(chunk)
    total = 0
    while total < 40 * len(chunk):
        total += len(await st_.read())
    await sender
    await session.close()
    await task
