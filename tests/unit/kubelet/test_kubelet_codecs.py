"""Pure pieces: log option validation, WebSocket channel framing for every subprotocol,
exec option parsing and the Status JSON kubectl decodes."""

from __future__ import annotations

import datetime as _dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.kubelet.api.logs import parse_log_options
from gateway.kubelet.server import HttpError
from gateway.kubelet.streams import session, websocket
from translators.base import LogOptions

NOW = _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)


def q(**kw: str) -> dict[str, list[str]]:
    return {k: [v] for k, v in kw.items()}


# --------------------------------------------------------------------------- logs


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, LogOptions()),
        (
            q(follow="true", timestamps="1", previous="false"),
            LogOptions(follow=True, timestamps=True),
        ),
        (q(tailLines="0"), LogOptions(tail_lines=0)),
        (q(tailLines="10", limitBytes="1"), LogOptions(tail_lines=10, limit_bytes=1)),
        (q(tail="5"), LogOptions(tail_lines=5)),
        (q(tail="all", tailLines="3"), LogOptions()),
        (q(sinceSeconds="60"), LogOptions(since=NOW - _dt.timedelta(seconds=60))),
        (
            q(sinceTime="2026-03-01T09:00:00Z"),
            LogOptions(since=_dt.datetime(2026, 3, 1, 9, 0, tzinfo=_dt.UTC)),
        ),
        (
            q(sinceTime="2026-03-01T11:30:00.5+02:00"),
            LogOptions(since=_dt.datetime(2026, 3, 1, 9, 30, 0, 500000, tzinfo=_dt.UTC)),
        ),
        (q(stream="Stderr"), LogOptions(stream="Stderr")),
        (q(stream="All", tailLines="2"), LogOptions(stream="All", tail_lines=2)),
        (q(container="app", insecureSkipTLSVerifyBackend="true"), LogOptions()),
    ],
)
def test_valid_log_options(query: dict[str, list[str]], expected: LogOptions) -> None:
    assert parse_log_options(query, now=NOW) == expected


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        (q(tailLines="-1"), "tailLines=-1: must be >= 0"),
        (q(tailLines="ten"), "tailLines='ten': expected an integer"),
        (q(limitBytes="0"), "limitBytes=0: must be >= 1"),
        (q(sinceSeconds="0"), "sinceSeconds=0: must be >= 1"),
        (
            q(sinceSeconds="1", sinceTime="2026-03-01T09:00:00Z"),
            "at most one of sinceSeconds or sinceTime",
        ),
        (q(sinceTime="yesterday"), "sinceTime='yesterday': expected RFC 3339"),
        (q(sinceTime="2026-03-01T09:00:00"), "expected RFC 3339"),  # no zone
        (q(follow="sometimes"), "follow='sometimes': expected true or false"),
        (q(previous="2"), "previous"),
        (q(timestamps="yes please"), "timestamps"),
        (q(stream="stdout"), "stream='stdout'"),
        (q(stream="Stdout", tailLines="1"), "tailLines is not supported when stream"),
    ],
)
def test_invalid_log_options_are_400(query: dict[str, list[str]], fragment: str) -> None:
    with pytest.raises(HttpError) as e:
        parse_log_options(query, now=NOW)
    assert e.value.status == 400
    assert fragment in e.value.message


# --------------------------------------------------------------------------- websocket


@pytest.mark.parametrize(
    ("protocol", "channel", "data", "wire"),
    [
        ("v5.channel.k8s.io", 1, b"hi", b"\x01hi"),
        ("v4.channel.k8s.io", 3, b"{}", b"\x03{}"),
        ("channel.k8s.io", 2, b"", b"\x02"),
        ("v4.base64.channel.k8s.io", 1, b"hi\n", "1aGkK"),
        ("base64.channel.k8s.io", 0, b"\x00\xff", "0AP8="),
    ],
)
def test_channel_framing(protocol: str, channel: int, data: bytes, wire: bytes | str) -> None:
    assert websocket.encode_message(protocol, channel, data) == wire
    assert websocket.decode_message(protocol, wire) == (channel, data)


@given(st.sampled_from(websocket.PROTOCOLS), st.integers(0, 4), st.binary(max_size=200))
def test_channel_framing_round_trips(protocol: str, channel: int, data: bytes) -> None:
    wire = websocket.encode_message(protocol, channel, data)
    assert isinstance(wire, str) == (protocol in websocket.BASE64)
    assert websocket.decode_message(protocol, wire) == (channel, data)


def test_v5_close_signal_decodes_as_channel_255() -> None:
    assert websocket.decode_message("v5.channel.k8s.io", bytes([255, 0])) == (255, b"\x00")


def test_bad_messages_are_rejected() -> None:
    with pytest.raises(ValueError):
        websocket.decode_message("v4.channel.k8s.io", b"")
    with pytest.raises(ValueError):
        websocket.decode_message("v4.base64.channel.k8s.io", "1!!!")


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v5.channel.k8s.io", "v4.channel.k8s.io"], "v5.channel.k8s.io"),
        (["v4.channel.k8s.io", "v5.channel.k8s.io"], "v4.channel.k8s.io"),  # client's order
        (["foo", "base64.channel.k8s.io"], "base64.channel.k8s.io"),
        ([], ""),
        (["v9.channel.k8s.io"], None),
    ],
)
def test_subprotocol_negotiation(offered: list[str], chosen: str | None) -> None:
    assert websocket.negotiate(offered) == chosen


def test_accept_key_rfc6455_example() -> None:
    assert websocket.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


# --------------------------------------------------------------------------- exec options, status


def test_exec_options_from_api_server_params() -> None:
    o = session.parse_exec_options(
        {"command": ["sh", "-c", "echo hi"], "input": ["1"], "output": ["1"], "error": ["1"]},
        need_command=True,
    )
    assert o == session.ExecOptions(("sh", "-c", "echo hi"), True, True, True, False)


def test_tty_with_stderr_is_accepted_and_stderr_dropped() -> None:
    o = session.parse_exec_options(
        {"command": ["sh"], "output": ["1"], "error": ["1"], "tty": ["1"]}, need_command=True
    )
    assert o.tty and not o.stderr and o.stdout


def test_attach_needs_no_command_but_some_stream() -> None:
    assert session.parse_exec_options({"output": ["true"]}, need_command=False).stdout
    with pytest.raises(HttpError, match="at least 1 of stdin"):
        session.parse_exec_options({}, need_command=False)


@pytest.mark.parametrize(("code", "wire"), [(3, "3"), (255, "255"), (-9, "137"), (300, "255")])
def test_exit_status_is_what_client_go_decodes(code: int, wire: str) -> None:
    s = session.exit_status(code, ("sh", "-c", "exit"))
    assert s["status"] == "Failure" and s["reason"] == "NonZeroExitCode"
    assert s["details"]["causes"] == [{"reason": "ExitCode", "message": wire}]
    assert 0 <= int(s["details"]["causes"][0]["message"]) <= 255  # ParseUint(msg, 10, 8)


def test_status_bytes_per_protocol() -> None:
    ok = session.success_status()
    fail = session.exit_status(7)
    assert json.loads(session.status_bytes("v4.channel.k8s.io", ok)) == {
        "metadata": {},
        "status": "Success",
    }
    assert (
        json.loads(session.status_bytes("v5.channel.k8s.io", fail))["reason"] == "NonZeroExitCode"
    )
    assert session.status_bytes("v2.channel.k8s.io", ok) == b""
    assert session.status_bytes("channel.k8s.io", fail).startswith(
        b"command terminated with non-zero exit code"
    )
