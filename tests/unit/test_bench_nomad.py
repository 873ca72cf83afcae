"""The Nomad-scale benchmark's pure parts (``bench.nomad_burst``, ``bench.nomad_proxy``): the
proxy's request accounting (against a loopback upstream), endpoint names, the floor's
bookkeeping, percentiles and per-pod counts, the report's ratios to the floor, the bench job
template and the plots.  No Nomad and no timing assertions here (bench/README.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from bench import nomad_burst, nomad_proxy, plots, procstat, report  # noqa: E402
from bench.nomad_burst import FloorBook, NomadRun  # noqa: E402
from devstack import nomad as devstack_nomad  # noqa: E402


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        ("POST", "/v1/jobs", "POST /v1/jobs"),
        ("GET", "/v1/jobs?prefix=nb-1&namespace=*", "GET /v1/jobs"),
        (
            "GET",
            "/v1/job/nb-1-p0001-ab12/allocations?index=42&wait=5m",
            "GET /v1/job/:id/allocations?index",
        ),
        ("GET", "/v1/job/nb-1-p0001-ab12/allocations?index=0", "GET /v1/job/:id/allocations"),
        ("DELETE", "/v1/job/nb-1-p0001-ab12?purge=true", "DELETE /v1/job/:id?purge"),
        ("DELETE", "/v1/job/nb-1-p0001-ab12", "DELETE /v1/job/:id"),
        ("GET", "/v1/allocation/1f2e", "GET /v1/allocation/:id"),
        ("GET", "/v1/client/allocation/1f2e/stats", "GET /v1/client/allocation/:id/stats"),
        ("GET", "/v1/client/fs/ls/1f2e?path=/alloc", "GET /v1/client/fs/ls/:id"),
        ("GET", "/v1/event/stream?topic=Job", "GET /v1/event/stream"),
        ("get", "/v1/node/abc", "GET /v1/node/:id"),
        ("DELETE", "/v1/var/nomad/jobs/nb-1-p0001-ab12?cas=3", "DELETE /v1/var/:path"),
        ("GET", "/v1/vars?prefix=nomad/jobs", "GET /v1/vars"),
    ],
)
def test_proxy_names_endpoints_without_ids(method: str, target: str, expected: str) -> None:
    assert nomad_proxy.endpoint(method, target) == expected


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A tiny HTTP/1.1 server: answers every request on the connection with its body length."""
    try:
        while line := await reader.readline():
            headers: dict[str, str] = {}
            while (h := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = h.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            body = b""
            if headers.get("transfer-encoding") == "chunked":
                while (size := int((await reader.readline()).strip(), 16)) != 0:
                    body += (await reader.readexactly(size + 2))[:-2]
                await reader.readline()
            elif headers.get("content-length"):
                body = await reader.readexactly(int(headers["content-length"]))
            answer = json.dumps({"line": line.decode().strip(), "body": len(body)}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                + answer
            )
            await writer.drain()
    finally:
        writer.close()


async def test_proxy_counts_requests_on_kept_alive_connections_and_the_most_open() -> None:
    upstream = await asyncio.start_server(_upstream, "127.0.0.1", 0)
    up_port = upstream.sockets[0].getsockname()[1]
    proxy = nomad_proxy.Proxy(("127.0.0.1", up_port))
    front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    port = front.sockets[0].getsockname()[1]
    async with upstream, front:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, trust_env=False) as one:
            r = await one.post("/v1/jobs", json={"Job": {"ID": "x" * 5000}})
            assert r.json() == {"line": "POST /v1/jobs HTTP/1.1", "body": 5017}
            r = await one.get("/v1/job/abc/allocations", params={"index": 7})
            assert r.json()["line"].startswith("GET /v1/job/abc/allocations?index=7")

            async def chunks() -> Any:
                yield b"abc"
                yield b"defg"

            r = await one.put("/v1/system/gc", content=chunks())
            assert r.json()["body"] == 7, "a chunked body is forwarded whole"
            assert proxy.stats.connections == 1, "one client connection, kept alive"
            async with httpx.AsyncClient(base_url=base, trust_env=False) as two:
                await asyncio.gather(*(two.delete(f"/v1/job/j{i}?purge=true") for i in range(3)))
                assert proxy.stats.connections_max >= 2
                assert proxy.stats.connections_opened == 1 + 3, "three deletes at once: 3 more"
        await asyncio.sleep(0.1)
        assert proxy.stats.requests == Counter(
            {
                "POST /v1/jobs": 1,
                "GET /v1/job/:id/allocations?index": 1,
                "PUT /v1/system/gc": 1,
                "DELETE /v1/job/:id?purge": 3,
            }
        )
        assert proxy.stats.connections == 0, "closed connections are counted down"
        peak = proxy.stats.connections_max
        proxy.stats.reset()
        assert proxy.stats.requests == Counter() and proxy.stats.connections_max == 0 < peak
        assert proxy.stats.connections_opened == 0


def test_floor_bookkeeping_waits_for_every_job_not_only_those_sent_so_far() -> None:
    book = FloorBook("floor-a-", expected=3)
    book.sent.update({"floor-a-p0000": 10.0, "floor-a-p0001": 10.5})
    book.observe({"JobID": "floor-a-p0000", "ClientStatus": "pending"}, 10.2)
    book.observe({"JobID": "floor-a-p0000", "ClientStatus": "running"}, 11.0)
    book.observe({"JobID": "floor-a-p0001", "ClientStatus": "running"}, 12.0)
    book.observe({"JobID": "floor-b-p0002", "ClientStatus": "running"}, 12.0)  # another run
    book.observe({"JobID": "floor-a-p0009", "ClientStatus": "running"}, 12.0)  # never sent
    assert not book.all_running() and not book.running_done.is_set(), "the third is not sent yet"
    book.sent["floor-a-p0002"] = 12.5
    book.observe({"JobID": "floor-a-p0000", "ClientStatus": "running"}, 20.0)  # first one counts
    assert not book.all_running()
    book.observe({"JobID": "floor-a-p0002", "ClientStatus": "running"}, 13.5)
    assert book.all_running() and book.running_done.is_set()
    assert sorted(book.to_running()) == [1.0, 1.0, 1.5]
    # a terminal allocation counts only after its job's deregister was sent
    book.observe({"JobID": "floor-a-p0000", "ClientStatus": "complete"}, 30.0)
    assert book.terminal == {}
    for i, job in enumerate(sorted(book.sent)):
        book.delete_sent[job] = 40.0 + i
        book.observe({"JobID": job, "ClientStatus": "complete" if i else "failed"}, 42.0 + i)
    assert book.all_terminal() and book.terminal_done.is_set()
    assert book.to_terminal() == [2.0, 2.0, 2.0]


def test_per_pod_counts_percentiles_and_the_api_clock() -> None:
    c = Counter({"POST /v1/jobs": 1000, "GET /v1/job/:id": 1000, "GET /v1/jobs": 10})
    pp = nomad_burst.per_pod(c, 1000)
    assert pp["total"] == 2.01 and next(iter(pp)) in ("POST /v1/jobs", "GET /v1/job/:id")
    assert nomad_burst.per_pod(c, 0) == {}
    assert nomad_burst.counts_diff({"a": 5, "b": 2}, {"a": 3, "b": 2}) == Counter({"a": 2})
    assert report.percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert report.percentile([3.0], 50) == 3.0
    pod = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:01Z"},
        "status": {
            "conditions": [
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:01Z",
                },
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:04Z"},
            ]
        },
    }
    assert nomad_burst.api_startup(pod) == 3.0
    pod["status"]["conditions"][1]["status"] = "False"  # type: ignore[index]
    assert nomad_burst.api_startup(pod) is None


def test_floor_job_is_the_rendered_job_renamed(tmp_path: Path) -> None:
    job = nomad_burst.render_template_job(tmp_path)
    task = job["Job"]["TaskGroups"][0]["Tasks"][0]
    assert task["Driver"] == "mock_driver" and task["Config"] == {"run_for": "240h"}
    assert task["LogConfig"]["Disabled"] is True
    assert job["Job"]["TaskGroups"][0]["EphemeralDisk"] == {"SizeMB": 10}
    assert task["Resources"] == {"CPU": 10, "MemoryMB": 10}
    floor = nomad_burst.floor_job(job, "floor-x-p0007", "p0007")
    assert floor["Job"]["ID"] == "floor-x-p0007" and floor["Job"]["Meta"]["k8s.name"] == "p0007"
    assert floor["Job"]["TaskGroups"] == job["Job"]["TaskGroups"]
    assert job["Job"]["ID"] != "floor-x-p0007", "the template is not modified"


def test_a_stopped_bench_agent_finds_the_mounts_its_allocations_left() -> None:
    info = "\n".join(
        [
            "22 1 0:21 / /tmp rw - tmpfs tmpfs rw",
            "90 22 0:50 / /tmp/nomad-x/alloc/a1/app/secrets rw - tmpfs tmpfs rw",
            "91 22 0:51 / /tmp/nomad-x/alloc/a1/app/private rw - tmpfs tmpfs rw",
            "92 22 0:52 / /tmp/nomad-x/alloc/a2/app/secrets rw - tmpfs tmpfs rw",
            "93 22 0:53 / /tmp/nomad-x rw - tmpfs tmpfs rw",
            "94 22 0:54 / /tmp/nomad-xy/alloc/a3/app/secrets rw - tmpfs tmpfs rw",
            "95 22 0:55 / /tmp/nomad-x/with\\040space rw - tmpfs tmpfs rw",
        ]
    )
    found = devstack_nomad.mounts_under(Path("/tmp/nomad-x"), info)
    assert found == [
        "/tmp/nomad-x/alloc/a1/app/private",
        "/tmp/nomad-x/alloc/a1/app/secrets",
        "/tmp/nomad-x/alloc/a2/app/secrets",
        "/tmp/nomad-x/with space",
    ], "below the dir only (not the dir itself, not a sibling with the same prefix), deepest first"


def _runs() -> list[NomadRun]:
    floor = NomadRun("floor", 1, 100, running_wall=2.0, gone_wall=1.0, purged_wall=1.0)
    floor.to_running = [0.5] * 100
    floor.requests_create = Counter({"POST /v1/jobs": 100})
    floor.requests_delete = Counter({"DELETE /v1/job/:id?purge": 100})
    floor.resyncs = 1
    vk = NomadRun("vkgate", 1, 100, running_wall=5.0, gone_wall=4.0, purged_wall=6.0)
    vk.to_running = [float(i) / 10 for i in range(100)]
    vk.to_running_api = [1.0] * 100
    vk.requests_create = Counter({"POST /v1/jobs": 100, "GET /v1/job/:id": 100})
    vk.requests_delete = Counter({"DELETE /v1/job/:id": 100, "DELETE /v1/job/:id?purge": 100})
    vk.agent_cpu_create, vk.agent_cpu_delete = 2.0, 1.0
    vk.idle_seconds, vk.idle_cpu = 30.0, 0.3
    vk.requests_idle = Counter({"GET /v1/jobs": 3})
    vk.connections_max, vk.connections_opened = 4, 9
    vk.load = (1.0, 2.0)
    vk.machine_create, vk.who_create = (9.0, 10.0), {"kube-apiserver": 4.0, "python": 3.5}
    rate = NomadRun("vkgate", 1, 100, mode="rate", rate=20, running_wall=6.0, error="boom")
    return [floor, vk, rate]


def test_report_gives_ratios_to_the_floor_of_the_same_round() -> None:
    args = nomad_burst.parse_args(["--pods", "100", "--idle", "30"])
    text = nomad_burst.markdown(_runs(), args=args, machine=["- machine: test"])
    vk_row = next(line for line in text.splitlines() if line.startswith("| 1 | vkgate | 100"))
    assert "| 2.5x |" in vk_row and "| 6.0x |" in vk_row, vk_row
    assert "| 2.00 | 2.00 | 4 / 9 | 30.0 ms |" in vk_row, vk_row
    assert "`GET /v1/job/:id` 1.00" in text
    assert "1.00 % of a core, Nomad requests 0.10/s" in text
    assert "round 1 vkgate rate: boom" in text
    assert "re-listed the allocations" in text and "- round 1 burst: 1 time(s)" in text
    assert "vkgate @ 20/s" in text
    cores = os.cpu_count() or 1
    assert (
        f"- round 1 vkgate create: 9.0 of 10.0 core-s busy (90 %), ≥ {9 / cores:.1f} s on {cores} cores; kube-apiserver 4.0, python 3.5"
        in text
    )


def test_machine_cpu_is_read_from_proc() -> None:
    busy, total = procstat.machine()
    assert 0 < busy <= total
    who = procstat.by_command()
    assert who and all(v >= 0 for v in who.values())


def test_nomad_arguments_are_bounded() -> None:
    for bad in (
        ["--pods", "5001"],
        ["--rounds", "6"],
        ["--no-burst"],
        ["--timeout", "0"],
        ["--nomad-event-buffer", "-1"],
    ):
        with pytest.raises(SystemExit):
            nomad_burst.parse_args(bad)
    args = nomad_burst.parse_args(["--rate", "20", "--no-burst"])
    assert args.pods == 1000 and args.rate_pods == 1000 and "--rate 20" in args.command


def test_plots_draw_the_nomad_figures(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [dict(r.row(), label="t") for r in _runs()]
    bigger = dict(rows[0], pods=1000, running_wall=9.0)
    rows.append(json.loads(json.dumps(bigger)))
    written = {p.name for p in plots.draw(rows, tmp_path)}
    assert {"nomad_startup.png", "nomad_ready.png", "nomad_requests.png"} <= written
    series = plots.series([r for r in rows if r["mode"] == "burst"], "running_wall", 1.0)
    assert series["floor (t)"] == [(100, 2.0), (1000, 9.0)]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_unmount_under_detaches_what_is_mounted_below_the_dir(tmp_path: Path) -> None:
    for name in ("secrets", "private"):
        (tmp_path / "alloc" / name).mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "tmpfs", str(tmp_path / "alloc" / name)], check=True
        )
    try:
        assert devstack_nomad.unmount_under(tmp_path) == 2
        assert devstack_nomad.mounts_under(tmp_path, Path("/proc/self/mountinfo").read_text()) == []
    finally:
        for name in ("secrets", "private"):
            subprocess.run(
                ["umount", "-l", str(tmp_path / "alloc" / name)], check=False, capture_output=True
            )


async def test_floor_stream_relists_when_nomad_closes_it() -> None:
    """Nomad closes a subscriber that falls behind: the floor lists the allocations and
    subscribes again after the last index it saw, so no allocation is missed."""
    seen: list[str] = []

    def frame(index: int, job: str) -> bytes:
        alloc = {"JobID": job, "ClientStatus": "running"}
        return json.dumps({"Index": index, "Events": [{"Payload": {"Allocation": alloc}}]}).encode()

    async def nomad(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = (await reader.readline()).decode().split(" ")[1]
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        seen.append(target)
        if target.startswith("/v1/allocations"):
            body = json.dumps([{"JobID": "f-p0001", "ClientStatus": "running"}]).encode()
            extra = b"X-Nomad-Index: 7\r\n"
        elif "index=" in target:
            body, extra = frame(9, "f-p0002") + b"\n", b""
        else:  # the first subscription: one event, then Nomad drops the slow subscriber
            body, extra = frame(5, "f-p0000") + b"\n" + b'{"Error": "subscription closed"}\n', b""
        writer.write(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
            + extra
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(nomad, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    book = FloorBook("f-", expected=3)
    book.sent.update({f"f-p000{i}": 0.0 for i in range(3)})
    async with server:
        task = asyncio.create_task(
            nomad_burst.event_stream(f"http://127.0.0.1:{port}", book, asyncio.Event())
        )
        try:
            await asyncio.wait_for(book.running_done.wait(), 10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert set(book.running) == {"f-p0000", "f-p0001", "f-p0002"}
    assert book.resyncs >= 1
    assert seen[:3] == [
        "/v1/event/stream?topic=Allocation",
        "/v1/allocations?task_states=false",
        "/v1/event/stream?topic=Allocation&index=8",
    ]


def test_the_nomad_event_buffer_option_reaches_the_servers_config(tmp_path: Path) -> None:
    args = nomad_burst.parse_args(["--pods", "100", "--nomad-event-buffer", "5000"])
    assert args.nomad_event_buffer == 5000 and "--nomad-event-buffer 5000" in args.command
    conf = json.loads(
        devstack_nomad._config(
            workdir=tmp_path, http=1, rpc=2, serf=3, bench_allocs=100, event_buffer_size=5000
        )
    )
    assert conf["server"] == {"event_buffer_size": 5000}
    plain = json.loads(devstack_nomad._config(workdir=tmp_path, http=1, rpc=2, serf=3))
    assert "server" not in plain  # Nomad's default (100)


async def test_at_rest_waits_for_the_bursts_events_to_be_written() -> None:
    """The idle window starts once the namespace's Event count holds still (the agent writes
    the burst's Events at its event_qps, minutes after the last pod is Running)."""
    counts = iter([10, 400, 800, 900, 900, 900, 900])
    asked: list[dict[str, Any]] = []

    class Kube:
        async def get(self, path: str, *, params: dict[str, Any]) -> dict[str, Any]:
            asked.append(params)
            n = next(counts)
            return {"metadata": {"remainingItemCount": n - 1}, "items": [{}]}

    waited = await nomad_burst.events_settled(Kube(), "ns", bound=60, poll=0)
    assert waited is not None and len(asked) == 6  # 900 three times in a row
    assert asked[0] == {"limit": 1}

    class Growing:
        n = 0

        async def get(self, path: str, *, params: dict[str, Any]) -> dict[str, Any]:
            self.n += 1
            return {"metadata": {"remainingItemCount": self.n}, "items": [{}]}

    assert await nomad_burst.events_settled(Growing(), "ns", bound=0.05, poll=0.01) is None


# --------------------------------------------------------------------------- --cluster


async def test_the_proxy_ends_and_remakes_mutual_tls_and_still_counts(tmp_path: Path) -> None:
    """The e2e cluster speaks HTTP over mutual TLS: the proxy serves the server's certificate,
    refuses a client without one the CA signed, and presents its own client certificate
    upstream, verifying the server by its name — and counts what passes."""
    import ssl

    from devstack.certs import issue, new_ca

    ca = new_ca(tmp_path, "ca", "bench-ca")
    server = issue(
        ca, tmp_path, "server", cn="server.global.nomad", dns=("server.global.nomad",), server=True
    )
    client = issue(ca, tmp_path, "client", cn="bench", client=True)
    up_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.files.cert))
    up_ctx.load_cert_chain(str(server.cert), str(server.key))
    up_ctx.verify_mode = ssl.CERT_REQUIRED  # Nomad's verify_https_client
    upstream = await asyncio.start_server(_upstream, "127.0.0.1", 0, ssl=up_ctx)
    up_port = upstream.sockets[0].getsockname()[1]
    listen_ctx, remake_ctx = nomad_proxy.tls_contexts(
        str(ca.files.cert), str(server.cert), str(server.key), str(client.cert), str(client.key)
    )
    proxy = nomad_proxy.Proxy(("127.0.0.1", up_port), remake_ctx, "server.global.nomad")
    front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, ssl=listen_ctx)
    port = front.sockets[0].getsockname()[1]
    target = nomad_burst.NomadTarget(
        pids=(os.getpid(),),
        workdir=tmp_path,
        upstream=f"127.0.0.1:{up_port}",
        direct_base="",
        token="mgmt",
        tls=nomad_burst.NomadTLS(ca.files.cert, client.cert, client.key),
        server_cert=server,
    )
    async with upstream, front:
        base = f"https://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, **target.client_kwargs()) as c:
            r = await c.post("/v1/jobs", json={"Job": {"ID": "j"}})
            assert r.json()["line"] == "POST /v1/jobs HTTP/1.1"
            assert c.headers["X-Nomad-Token"] == "mgmt"
        no_cert = ssl.create_default_context(cafile=str(ca.files.cert))
        no_cert.check_hostname = False
        async with httpx.AsyncClient(base_url=base, verify=no_cert, trust_env=False) as c:
            with pytest.raises(httpx.HTTPError):
                await c.get("/v1/jobs")
        await asyncio.sleep(0.1)
    assert proxy.stats.requests == Counter({"POST /v1/jobs": 1})
    assert target.cpu_seconds() is not None


def test_cluster_settings_give_vkgate_the_policy_token_and_mutual_tls(tmp_path: Path) -> None:
    tls = nomad_burst.NomadTLS(tmp_path / "ca.crt", tmp_path / "c.crt", tmp_path / "c.key")
    target = nomad_burst.NomadTarget(
        pids=(1,),
        workdir=tmp_path,
        upstream="127.0.0.1:1",
        direct_base="https://localhost:1",
        token="mgmt",
        vkgate_token="least",
        tls=tls,
    )

    class _Proxy:
        address = "https://127.0.0.1:9"

    s = nomad_burst.Session(
        None,  # type: ignore[arg-type]
        target,
        _Proxy(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        tmp_path,
        {},
        nomad_burst.parse_args(["--cluster"]),
    )
    nomad = nomad_burst.vkgate_settings(s, 10)["backend"]["nomad"]
    assert nomad["address"] == "https://127.0.0.1:9"
    assert nomad["token"] == "least", "vkgate runs with the shipped policy's token, not management"
    assert nomad["tls_server_name"] == "server.global.nomad"
    assert (nomad["ca_cert"], nomad["client_cert"], nomad["client_key"]) == (
        str(tls.ca_file),
        str(tls.cert_file),
        str(tls.key_file),
    )
    dev = nomad_burst.NomadTarget(pids=(1,), workdir=tmp_path, upstream="x:1", direct_base="")
    s.nomad = dev
    plain = nomad_burst.vkgate_settings(s, 10)["backend"]["nomad"]
    assert "token" not in plain and "ca_cert" not in plain
    assert dev.client_kwargs() == {"verify": True, "headers": {}, "trust_env": False}


def test_the_cluster_option_is_named_and_excludes_pprof() -> None:
    args = nomad_burst.parse_args(["--cluster", "--pods", "10"])
    assert args.cluster and args.command.endswith("--cluster")
    assert not nomad_burst.parse_args([]).cluster
    with pytest.raises(SystemExit):
        nomad_burst.parse_args(["--cluster", "--nomad-pprof", "/tmp/x"])


async def test_placements_count_running_allocations_of_the_runs_jobs_by_client() -> None:
    allocs = [
        {"JobID": "nb-1-p0", "NodeName": "c1", "ClientStatus": "running"},
        {"JobID": "nb-1-p1", "NodeName": "c2", "ClientStatus": "running"},
        {"JobID": "nb-1-p2", "NodeName": "c2", "ClientStatus": "running"},
        {"JobID": "nb-1-p3", "NodeName": "c1", "ClientStatus": "pending"},
        {"JobID": "other-p0", "NodeName": "c1", "ClientStatus": "running"},
    ]

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/allocations"
        return httpx.Response(200, json=allocs)

    async with httpx.AsyncClient(
        base_url="http://nomad.test", transport=httpx.MockTransport(answer)
    ) as c:
        assert await nomad_burst.placements(c, "nb-1-") == {"c1": 1, "c2": 2}

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500)

    async with httpx.AsyncClient(
        base_url="http://nomad.test", transport=httpx.MockTransport(broken)
    ) as c:
        assert await nomad_burst.placements(c, "nb-1-") == {}


async def test_the_floor_sends_again_what_nomad_refused_with_429() -> None:
    answers = iter([429, 429, 200])
    sent = 0

    async def send() -> httpx.Response:
        nonlocal sent
        sent += 1
        return httpx.Response(next(answers))

    r = await nomad_burst.patient(send, pause=0)
    assert r.status_code == 200 and sent == 3

    async def refused() -> httpx.Response:
        nonlocal sent
        sent += 1
        return httpx.Response(429)

    sent = 0
    assert (await nomad_burst.patient(refused, tries=3, pause=0)).status_code == 429
    assert sent == 3, "bounded: the last answer is returned, not retried forever"
