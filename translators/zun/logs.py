"""Container logs through ``GET /containers/{id}/logs``, with ``follow`` done by polling.

Zun has no streaming logs (docs/design/zun.md, "Limitations"), so ``kubectl logs -f`` is emulated:
fetch with ``timestamps=True``, then every ``poll_interval`` seconds fetch again with ``since=<last
timestamp, whole seconds>`` and drop the lines already sent (same timestamp and text).  The stream
ends once the container is no longer running (after one last fetch) or the client goes away.
Timestamps are stripped again unless the caller asked for them.  Other options: ``tailLines`` →
``tail``, ``sinceTime``/``sinceSeconds`` → ``since`` (epoch seconds), ``stream=Stdout|Stderr`` → the
``stdout``/``stderr`` flags, ``limitBytes`` is applied here, ``previous`` is refused (Zun keeps no
previous instance).

Only standalone containers have logs: Zun looks the id up among plain containers, so a
capsule container answers 404, which the translator turns into a clear message.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from translators.base import BackendConflict, BackendRejected, LogOptions
from translators.zun.client import ZunClient
from vkgate_core.timeparse import parse_rfc3339

_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) ")


def split_timestamp(line: str) -> tuple[tuple[_dt.datetime, int] | None, str]:
    """``"2026-03-01T10:00:00.5Z text"`` → ((datetime, nanoseconds), ``"text"``)."""
    m = _TS.match(line)
    if not m:
        return None, line
    base, frac, zone = m.groups()
    try:
        when = parse_rfc3339(base + zone)
    except ValueError:
        return None, line
    nanos = int((frac or "0").ljust(9, "0"))
    return (when, nanos), line[m.end() :]


def query(options: LogOptions, *, timestamps: bool, since: int | None = None) -> dict[str, Any]:
    """Zun's log parameters for ``options``; ``since`` is a follow poll's resume point (then
    every line after it: no tail)."""
    if options.previous:
        raise BackendRejected(
            "previous terminated container logs are not available from Zun", status=400
        )
    params: dict[str, Any] = {
        "stdout": "True" if options.stream in ("All", "Stdout") else "False",
        "stderr": "True" if options.stream in ("All", "Stderr") else "False",
        "timestamps": "True" if timestamps else "False",
    }
    if since is not None:
        params["since"] = since
        return params
    if options.since is not None:
        params["since"] = int(options.since.timestamp())
    if options.tail_lines is not None:  # with since too: the last N lines of those since
        params["tail"] = max(0, options.tail_lines)
    elif options.since is None:
        params["tail"] = "all"
    return params


async def read_logs(
    client: ZunClient,
    ident: str,
    options: LogOptions,
    *,
    alive: Callable[[], Awaitable[bool]],
    sleep: Callable[[float], Awaitable[None]],
    poll_interval: float = 1.0,
) -> AsyncGenerator[bytes, None]:
    """Yield log bytes of one standalone container (see the module docstring)."""
    want_ts = options.timestamps
    fetch_ts = want_ts or options.follow
    budget = options.limit_bytes
    last: tuple[_dt.datetime, int] | None = None
    sent_at_last: set[str] = set()

    def emit(lines: list[str]) -> list[bytes]:
        nonlocal last, sent_at_last, budget
        out: list[bytes] = []
        for line in lines:
            ts, text = split_timestamp(line) if fetch_ts else (None, line)
            duplicate = (
                ts is not None
                and last is not None
                and (ts < last or (ts == last and line in sent_at_last))
            )
            if duplicate:
                continue
            if ts is not None:
                if ts != last:
                    last, sent_at_last = ts, set()
                sent_at_last.add(line)
            chunk = (line if want_ts or ts is None else text).encode()
            if budget is not None:
                if budget <= 0:
                    break
                chunk = chunk[:budget]
                budget -= len(chunk)
            out.append(chunk)
        return out

    try:
        text = await client.container_logs(ident, query(options, timestamps=fetch_ts))
    except BackendConflict as exc:
        raise BackendRejected(
            f"container has not started yet, no logs: {exc}", status=400, reason="BadRequest"
        ) from exc
    for chunk in emit(text.splitlines(keepends=True)):
        yield chunk
    if not options.follow:
        return
    running = True
    while running and (budget is None or budget > 0):
        await sleep(poll_interval)
        running = await alive()
        since = int(last[0].timestamp()) if last is not None else None
        try:
            text = await client.container_logs(ident, query(options, timestamps=True, since=since))
        except BackendConflict:
            return  # deleting / gone: the stream is over
        for chunk in emit(text.splitlines(keepends=True)):
            yield chunk
