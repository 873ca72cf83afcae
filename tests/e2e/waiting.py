"""Waiting in an e2e test: ``wait_until`` polls a condition, failing with what was last seen;
``events_about`` lists the Kubernetes Events about one object and ``wait_for_event`` waits for
one — Events trail the status they belong to by up to a few seconds (vkgate writes them
through their own queue and budget), so a test that reads one right after a status change
waits for it, never reads it once."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 60.0, every: float = 0.3) -> Any:
    """Call ``fn`` until it returns something truthy (returned); AssertionError after
    ``timeout`` seconds naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@runtime_checkable
class ApiReader(Protocol):
    """Reads the API server as admin: ``devstack.controlplane.ControlPlane`` (the decoded body
    of a GET, None on 404)."""

    def get(self, path: str) -> dict[str, Any] | None: ...


#: ``kubectl(*args, input=None, check=True, timeout=60)`` as conftest's ``make_kubectl`` makes it.
KubectlRun: TypeAlias = Callable[..., "subprocess.CompletedProcess[str]"]

#: Where Events are read from: the control plane's API, or a ``kubectl``.
EventSource: TypeAlias = ApiReader | KubectlRun

Event: TypeAlias = dict[str, Any]


def events_about(
    source: EventSource,
    ns: str,
    name: str,
    reason: str | None = None,
    *,
    event_type: str | None = None,
) -> list[Event]:
    """The Events in namespace ``ns`` about the object named ``name`` (``involvedObject.name``),
    with ``reason`` and of ``event_type`` (``Normal``/``Warning``) when given, in the API
    server's order.  Read once, through the API (``source.get``) or ``kubectl``; filtered by
    the server (field selector) and again here, where an Event without
    ``involvedObject.name`` is simply not about ``name``."""
    fields = {"involvedObject.name": name, "reason": reason}
    selector = ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    if isinstance(source, ApiReader):
        query = urllib.parse.quote(selector)
        body = source.get(f"/api/v1/namespaces/{ns}/events?fieldSelector={query}") or {}
    else:
        out = source("get", "events", "-n", ns, "--field-selector", selector, "-o", "json").stdout
        body = json.loads(out)
    items: list[Event] = list(body.get("items") or [])
    return [
        e
        for e in items
        if (e.get("involvedObject") or {}).get("name") == name
        and (reason is None or e.get("reason") == reason)
        and (event_type is None or e.get("type") == event_type)
    ]


def wait_for_event(
    what: str,
    source: EventSource,
    ns: str,
    name: str,
    reason: str | None = None,
    *,
    event_type: str | None = None,
    match: Callable[[Event], object] | None = None,
    timeout: float = 30.0,
    every: float = 0.3,
) -> Event:
    """The first Event ``events_about(source, ns, name, reason, event_type=...)`` lists that
    ``match`` accepts (any, without ``match``), once there is one; AssertionError after
    ``timeout`` seconds naming ``what`` and every Event about ``name`` seen then."""

    def found() -> list[Event]:
        evs = events_about(source, ns, name, reason, event_type=event_type)
        return [e for e in evs if match is None or match(e)]

    try:
        first: Event = wait_until(what, found, timeout=timeout, every=every)[0]
    except AssertionError as exc:
        seen = [
            (e.get("type"), e.get("reason"), e.get("message"))
            for e in events_about(source, ns, name)
        ]
        raise AssertionError(f"{exc}; the Events about {ns}/{name}: {seen}") from None
    return first
