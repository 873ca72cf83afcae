"""Client CPU per request to a real kube-apiserver: the kube client's lean HTTP/1.1 path
against the same client on httpx, and aiohttp as a third opinion.

Run: ``python -m devstack.netns -- python -m bench.http_path [--requests 2000]``.

Each client sends ``--requests`` merge PATCHes of one ConfigMap, ``--concurrency`` in flight,
in ``--rounds`` alternating rounds; the figure is this process's CPU time (``process_time``)
divided by the requests, so the API server's own work is not in it.  The results are the
table in docs/design/kube-client.md, "HTTP path".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence

import httpx

from devstack.controlplane import launch_control_plane
from gateway.kube.client import KubeClient

PATH = "/api/v1/namespaces/default/configmaps/bench-http-path"


async def drive(
    n: int, concurrency: int, fn: Callable[[int], Awaitable[None]]
) -> tuple[float, float]:
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with slots:
            await fn(i)

    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    return (time.process_time() - cpu) / n * 1e3, time.monotonic() - wall


async def run(kubeconfig: str, args: argparse.Namespace) -> None:
    lean = KubeClient.from_kubeconfig(kubeconfig, qps=0, burst=1)
    via_httpx = KubeClient(
        lean.config,
        transport=httpx.AsyncHTTPTransport(verify=lean.config.ssl_context()),
        qps=0,
        burst=1,
    )
    await lean.create(
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": PATH.rsplit("/", 1)[1]}, "data": {"a": "0"}},
    )
    clients: dict[str, Callable[[int], Awaitable[None]]] = {}
    for name, client in (("kube client, lean HTTP/1.1", lean), ("kube client, httpx", via_httpx)):

        async def patch(i: int, client: KubeClient = client) -> None:
            await client.patch(PATH, {"data": {"a": str(i)}}, patch_type="merge")

        clients[name] = patch
    session = None
    try:
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=lean.config.ssl_context(), limit=args.concurrency)
        )

        async def aio(i: int) -> None:
            assert session is not None
            body = json.dumps({"data": {"a": str(i)}}).encode()
            headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
            async with session.patch(lean.config.server + PATH, data=body, headers=headers) as r:
                assert r.status == 200, r.status
                json.loads(await r.read())

        clients["aiohttp (plain session)"] = aio
    except ImportError:
        pass
    print("| client | round | CPU per request | wall |\n|---|---|---|---|")
    try:
        for rnd in range(args.rounds):
            names = list(clients) if rnd % 2 == 0 else list(reversed(clients))
            for name in names:
                cpu, wall = await drive(args.requests, args.concurrency, clients[name])
                print(f"| {name} | {rnd + 1} | {cpu:.3f} ms | {wall:.2f} s |", flush=True)
    finally:
        if session is not None:
            await session.close()
        await lean.aclose()
        await via_httpx.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    cp = launch_control_plane()
    try:
        asyncio.run(run(str(cp.kubeconfig), args))
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
