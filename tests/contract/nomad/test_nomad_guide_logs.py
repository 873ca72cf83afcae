"""The "kubectl logs flags" table of docs/backends/nomad.md against the Nomad translator: each
row states what a flag does, and a probe here runs that flag against the protocol as Nomad
speaks it (respx) and checks the statement. A row without a probe, or a probe whose row no
longer says what it checks, fails."""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from nomad_fixtures import ADDRESS, MakeTranslator, captured

from translators.base import BackendRejected, LogOptions, PodRef
from translators.nomad.runs import Runs
from translators.nomad.status import parse_time

pytestmark = pytest.mark.contract

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "backends" / "nomad.md"


def flag_rows() -> dict[str, str]:
    """kubelet query parameter → the guide's text for it (a row may name several)."""
    text = GUIDE.read_text()
    body = text.split("### kubectl logs flags\n", 1)[1].split("\n#", 1)[0]
    rows: dict[str, str] = {}
    for line in body.splitlines():
        if not line.startswith("| ") or line.startswith("| flag"):
            continue
        first, said = (c.strip() for c in line.strip().strip("|").split("|")[:2])
        for group in re.findall(r"\(([^)]*)\)", first):
            for query in re.findall(r"`(\w+)`", group):
                rows[query] = said
    return rows


def frame(data: bytes, kind: str = "stdout") -> bytes:
    encoded = base64.b64encode(data).decode()
    return json.dumps({"File": f"alloc/logs/app.{kind}.0", "Offset": 0, "Data": encoded}).encode()


class Body(httpx.AsyncByteStream):
    def __init__(self, *chunks: bytes, hang: bool = False) -> None:
        self.chunks, self.hang = chunks, hang

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            yield c
        if self.hang:
            await asyncio.Event().wait()


def ref_of(doc: dict[str, Any]) -> PodRef:
    meta = doc["job"]["Meta"]
    return PodRef(meta["k8s.namespace"], meta["k8s.name"], meta["k8s.uid"])


def mock_job(nomad: respx.MockRouter, doc: dict[str, Any]) -> None:
    job = doc["job"]
    nomad.get(f"/v1/job/{job['ID']}").mock(return_value=httpx.Response(200, json=job))
    nomad.get(f"/v1/job/{job['ID']}/allocations").mock(
        return_value=httpx.Response(200, json=doc["allocations"])
    )


async def logs_of(
    make_translator: MakeTranslator,
    options: LogOptions,
    *,
    stdout: bytes = b"out 1\nout 2\n",
    stderr: bytes = b"err 1\n",
    doc: str = "succeeded",
) -> bytes:
    """The translator's answer for a finished container whose logs are ``stdout``/``stderr``."""
    state = captured(doc)
    alloc = state["allocations"][0]["ID"]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, state)

        def logs(request: httpx.Request) -> httpx.Response:
            kind = request.url.params["type"]
            data = stdout if kind == "stdout" else stderr
            return httpx.Response(200, stream=Body(frame(data, kind)))

        nomad.get(f"/v1/client/fs/logs/{alloc}").mock(side_effect=logs)
        return b"".join([c async for c in t.logs(ref_of(state), "app", options)])


def run_start() -> _dt.datetime:
    """The lower bound of the succeeded container's lines (no recorded runs: its allocation's
    creation, docs/kubelet.md, "Logs")."""
    start = parse_time(captured("succeeded")["allocations"][0]["CreateTime"])
    assert start is not None
    return start


# --------------------------------------------------------------------------- the probes


async def probe_follow(make_translator: MakeTranslator) -> None:
    """A follow streams new lines and ends once the task is dead (a blocking query on the
    allocation), with their receive time when timestamps are asked for."""
    doc = captured("running")
    alloc = doc["allocations"][0]
    dead = json.loads(json.dumps(alloc))
    dead["TaskStates"]["app"]["State"] = "dead"
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)

        def logs(request: httpx.Request) -> httpx.Response:
            stdout = request.url.params["type"] == "stdout"
            if request.url.params["follow"] == "false":
                return httpx.Response(200, stream=Body(frame(b"backlog\n")) if stdout else Body())
            return httpx.Response(200, stream=Body(frame(b"live\n") if stdout else b"", hang=True))

        nomad.get(f"/v1/client/fs/logs/{alloc['ID']}").mock(side_effect=logs)
        nomad.get(f"/v1/allocation/{alloc['ID']}").mock(
            side_effect=[
                httpx.Response(200, json=alloc, headers={"X-Nomad-Index": "50"}),
                httpx.Response(200, json=dead, headers={"X-Nomad-Index": "51"}),
            ]
        )
        options = LogOptions(follow=True, timestamps=True)
        chunks = t.logs(ref_of(doc), "app", options)
        out = await asyncio.wait_for(_read(chunks), 10)
    backlog, live = out.decode().splitlines()
    assert backlog.endswith(" backlog") and live.endswith(" live")
    assert re.fullmatch(r"\S+T\d\d:\d\d:\d\dZ backlog", backlog), "whole seconds"
    assert re.fullmatch(r"\S+T\d\d:\d\d:\d\d\.\d{9}Z live", live), "receive time, RFC3339Nano"


async def probe_tail(make_translator: MakeTranslator) -> None:
    """The last lines over both streams: stdout's share first, then stderr's."""
    out = await logs_of(
        make_translator, LogOptions(tail_lines=3), stdout=b"o1\no2\no3\n", stderr=b"e1\ne2\n"
    )
    assert out == b"o3\ne1\ne2\n"


async def probe_limit_bytes(make_translator: MakeTranslator) -> None:
    out = await logs_of(make_translator, LogOptions(limit_bytes=7, stream="Stdout"))
    assert out == b"out 1\no"


async def probe_timestamps(make_translator: MakeTranslator) -> None:
    """Backlog lines carry the run's start (here its allocation's creation) in whole seconds."""
    out = await logs_of(make_translator, LogOptions(timestamps=True, stream="Stdout"))
    stamp = run_start().strftime("%Y-%m-%dT%H:%M:%SZ")
    assert out.decode().splitlines() == [f"{stamp} out 1", f"{stamp} out 2"]


async def probe_previous(make_translator: MakeTranslator) -> None:
    """The run before in the same allocation, else the replaced allocation, else a 400."""
    # the same allocation: a recorded run end (5 bytes of stdout, 0 of stderr) splits the log
    runs = Runs()
    runs.record("a1", "app", 1, (5, 0))
    ts = {"State": "running", "Restarts": 1, "Events": [{"Type": "Terminated", "Time": 1}]}
    before = runs.window("a1", "app", ts, previous=True)
    assert before is not None and dict(before.start) == {"stdout": 0, "stderr": 0}
    assert dict(before.end) == {"stdout": 5, "stderr": 0}
    # no earlier run recorded: the allocation this one replaced, else the 400
    doc = captured("succeeded")
    alloc = doc["allocations"][0]
    t = await make_translator()
    with respx.mock(base_url=ADDRESS) as nomad:
        mock_job(nomad, doc)
        nomad.get(f"/v1/allocation/{alloc['ID']}").mock(
            return_value=httpx.Response(200, json={**alloc, "PreviousAllocation": "prev"})
        )
        nomad.get("/v1/allocation/prev").mock(
            return_value=httpx.Response(200, json={**alloc, "ID": "prev"})
        )
        nomad.get("/v1/client/fs/logs/prev").mock(
            return_value=httpx.Response(200, stream=Body(frame(b"replaced\n")))
        )
        options = LogOptions(previous=True, stream="Stdout")
        assert await _read(t.logs(ref_of(doc), "app", options)) == b"replaced\n"
        nomad.get(f"/v1/allocation/{alloc['ID']}").mock(
            return_value=httpx.Response(200, json={**alloc, "PreviousAllocation": ""})
        )
        with pytest.raises(BackendRejected, match="previous terminated container") as err:
            await _read(t.logs(ref_of(doc), "app", options))
    assert err.value.reason == "NoPreviousContainer"


async def probe_since(make_translator: MakeTranslator) -> None:
    """Every line when the run started at or after the time; refused when it started before."""
    start = run_start()
    for since in (start - _dt.timedelta(hours=1), start):
        out = await logs_of(make_translator, LogOptions(since=since, stream="Stdout"))
        assert out == b"out 1\nout 2\n", since
    with pytest.raises(BackendRejected, match="cannot honour sinceSeconds/sinceTime") as err:
        await logs_of(make_translator, LogOptions(since=start + _dt.timedelta(seconds=1)))
    assert err.value.reason == "SinceNotSupported"


async def probe_stream(make_translator: MakeTranslator) -> None:
    out = await logs_of(make_translator, LogOptions(), stdout=b"o1\no2\n", stderr=b"e1\n")
    assert out == b"o1\no2\ne1\n"


async def _read(it: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in it])


Probe = Callable[[MakeTranslator], Awaitable[None]]
#: query parameter → (words its row must say, the probe that checks them)
CLAIMS: dict[str, tuple[tuple[str, ...], Probe]] = {
    "follow": (("exact", "ends when the task is dead"), probe_follow),
    "tailLines": (("exact", "last lines of stdout, then of stderr"), probe_tail),
    "limitBytes": (("exact",), probe_limit_bytes),
    "timestamps": (("approximation", "whole seconds", "receive time"), probe_timestamps),
    "previous": (
        ("same allocation", "replaced", "400 `previous terminated container"),
        probe_previous,
    ),
    "sinceSeconds": (("at or after", "refused with a 400", "cannot honour"), probe_since),
    "sinceTime": (("at or after", "refused with a 400", "cannot honour"), probe_since),
    "stream": (("all of stdout, then all of stderr",), probe_stream),
}


def test_every_row_of_the_table_has_a_probe() -> None:
    assert set(flag_rows()) == set(CLAIMS)


@pytest.mark.parametrize("query", sorted(CLAIMS))
async def test_the_row_says_what_the_translator_does(
    query: str, make_translator: MakeTranslator
) -> None:
    said = flag_rows()[query]
    words, probe = CLAIMS[query]
    for word in words:
        assert word in said, f"docs/backends/nomad.md, {query}: {word!r} not in {said!r}"
    await probe(make_translator)
