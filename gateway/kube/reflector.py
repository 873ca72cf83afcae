"""List + watch one resource into a local store, and tell a handler about every change.

The loop (client-go's Reflector, made small)::

    LIST (limit=500, follow continue)  ──▶ diff against the store ──▶ synced.set()
      │                                      (ADDED / MODIFIED / synthesized DELETED)
      ▼
    WATCH from the list's resourceVersion, allowWatchBookmarks, timeoutSeconds 240-360 random
      │  every event (BOOKMARK too) moves resourceVersion forward
      ├─ clean close (server timeout)      → re-watch from the last RV at once
      ├─ silent for inactivity_timeout     → drop the connection, re-watch from the last RV
      ├─ 410 Gone (HTTP or ERROR event)    → LIST again and diff (objects that vanished meanwhile
      │                                      get a synthesized DELETED, changed ones MODIFIED)
      └─ any other error                   → jittered backoff, then re-watch (or relist)

Cached objects drop ``metadata.managedFields`` (``lean``) as they arrive, from lists and watch
events alike: it is server-side-apply bookkeeping nothing here reads, and often the largest part
of a pod (client-go's informers strip it with a transform for the same reason).  Every other
field is kept as the server sent it.  A PUT built from a cached object still keeps the server's
managed fields: an update that omits them leaves them unchanged.

Resource versions are opaque strings: only compared for equality, never ordered.  The handler is
awaited inline (keep it fast, e.g. enqueue a key); an exception in it is logged and never stops
the reflector.  All timing goes through ``vkgate_core.clock.Clock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar, cast

from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError, Gone, truncate
from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger("gateway.kube.reflector")

#: The objects' JSON shape (``vkgate_core.kubetypes.Pod`` for the pod cache): the reflector
#: stores what the server sent; the type names it for the code that reads the store.
T = TypeVar("T", bound=Mapping[str, Any])

Handler = Callable[[str, T, T | None], Awaitable[None]]

#: The API server sends a BOOKMARK about once a minute on a quiet watch; a watch silent for much
#: longer is a dead connection (e.g. a half-open TCP session after an API server crash).
DEFAULT_INACTIVITY = 150.0
#: A watch that ends cleanly sooner than this is treated like a failure (backoff), so a server
#: that closes watches at once cannot make us spin.
MIN_HEALTHY_WATCH = 1.0


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


def lean(obj: dict[str, Any], prev: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``obj`` as the cache keeps it: without ``metadata.managedFields``, and with its keys and
    short strings shared with every other cached object (``sys.intern``).

    A decoded pod is about 10 KiB of Python objects, most of it the same keys ("metadata",
    "lastTransitionTime", …) and values ("True", "Running", "IfNotPresent", …) again in every
    pod; shared, it is about 4.5 KiB (docs/design/kube-client.md, "Cache").  Interned strings
    go away with the last object that uses them.  Values are unchanged (equal strings).

    With ``prev`` (the cached version this one replaces), an unchanged ``spec``,
    ``metadata.labels`` and ``metadata.annotations`` are taken from ``prev`` instead: a pod's
    status updates then share one spec, and so does whatever still holds an older version.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    out = _shared(obj)
    if prev is not None:
        _reuse(out, prev, "spec")
        new_meta, old_meta = out.get("metadata"), prev.get("metadata")
        if isinstance(new_meta, dict) and isinstance(old_meta, Mapping):
            _reuse(new_meta, old_meta, "labels")
            _reuse(new_meta, old_meta, "annotations")
    return out


def _reuse(new: dict[str, Any], old: Mapping[str, Any], part: str) -> None:
    value = old.get(part)
    if value is not None and part in new and new[part] == value:
        new[part] = value


_SHORT = 64


def _shared(obj: dict[str, Any]) -> dict[str, Any]:
    intern = sys.intern
    return {intern(key): _shared_value(value) for key, value in obj.items()}


def _shared_value(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return sys.intern(value) if len(value) <= _SHORT else value
    if kind is dict:
        return _shared(value)
    if kind is list:
        return [_shared_value(v) for v in value]
    return value


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Reflector(Generic[T]):
    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        inactivity_timeout: float = DEFAULT_INACTIVITY,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        watch_timeout: tuple[int, int] = (240, 360),
    ) -> None:
        self.client = client
        self.path = path
        self.params = dict(params or {})
        self.clock: Clock = clock or SystemClock()
        self.inactivity_timeout = inactivity_timeout
        self.backoff = backoff or Backoff(base=0.5, cap=30.0)
        self.watch_timeout = watch_timeout
        self._rng = rng or random.Random()
        self.store: dict[str, T] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        #: Counters for tests and metrics: lists, watches, gone, errors, inactivity.
        self.counts: dict[str, int] = {
            "lists": 0,
            "watches": 0,
            "gone": 0,
            "errors": 0,
            "inactivity": 0,
        }
        #: Why the last list or watch failed ("" after a successful list): what a start-up
        #: gate reports while the first list has not succeeded (gateway.inputs).
        self.last_error = ""
        self._last_event = 0.0
        self._in_handler = False

    # -- main loop ---------------------------------------------------------------------

    async def run(self, handler: Handler[T]) -> None:
        """List, then watch forever; returns only by cancellation."""
        need_list = True
        failures = 0
        while True:
            started = self.clock.monotonic()
            try:
                if need_list:
                    await self._relist(handler)
                    need_list = False
                await self._watch_once(handler)
                if self.clock.monotonic() - started >= MIN_HEALTHY_WATCH:
                    failures = 0
                    continue
                failures += 1
                delay = self.backoff.delay(failures, self._rng)
                log.debug("watch %s closed immediately; re-watch in %.1fs", self.path, delay)
            except Gone as exc:
                self.counts["gone"] += 1
                log.info("watch %s: resourceVersion too old (%s); relisting", self.path, exc)
                need_list = True
                if self.clock.monotonic() - started >= MIN_HEALTHY_WATCH:
                    failures = 0
                    continue
                failures += 1  # 410 right after a fresh list: do not spin list+watch
                delay = self.backoff.delay(failures, self._rng)
            except ApiError as exc:
                self.counts["errors"] += 1
                failures += 1
                delay = self.backoff.delay(failures, self._rng)
                self.last_error = truncate(f"{'list' if need_list else 'watch'} failed: {exc}")
                level = (
                    logging.WARNING if failures in (1, 5) or failures % 20 == 0 else logging.DEBUG
                )
                log.log(
                    level,
                    "%s %s failed (%s); retry %d in %.1fs",
                    "list" if need_list else "watch",
                    self.path,
                    exc,
                    failures,
                    delay,
                )
            await self.clock.sleep(delay)

    # -- list --------------------------------------------------------------------------

    async def _relist(self, handler: Handler[T]) -> None:
        self.counts["lists"] += 1
        result = await self.client.list(self.path, params=self.params)
        fresh = {
            (key := object_key(o)): cast(T, lean(o, self.store.get(key)))
            for o in result.get("items") or []
        }
        old_store = self.store
        self.store = dict(fresh)
        self.resource_version = str((result.get("metadata") or {}).get("resourceVersion") or "")
        for key, old in old_store.items():
            if key not in fresh:
                await self._call(handler, "DELETED", old, old)
        for key, obj in fresh.items():
            prev = old_store.get(key)
            if prev is None:
                await self._call(handler, "ADDED", obj, None)
            elif _rv(prev) != _rv(obj) or _uid(prev) != _uid(obj):
                await self._call(handler, "MODIFIED", obj, prev)
        self.last_error = ""
        self.synced.set()

    # -- watch -------------------------------------------------------------------------

    async def _watch_once(self, handler: Handler[T]) -> None:
        self.counts["watches"] += 1
        params = dict(self.params)
        params.update(
            resourceVersion=self.resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=self._rng.randint(*self.watch_timeout),
        )
        self._last_event = self.clock.monotonic()
        task = asyncio.create_task(self._consume(params, handler))
        try:
            while not task.done():
                idle = self.clock.monotonic() - self._last_event
                remaining = self.inactivity_timeout - idle
                if remaining <= 0 and not self._in_handler:
                    self.counts["inactivity"] += 1
                    log.info("watch %s silent for %.0fs; re-establishing", self.path, idle)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return
                sleeper = asyncio.ensure_future(self.clock.sleep(max(remaining, 0.05)))
                try:
                    await asyncio.wait({task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
            task.result()  # re-raise the watch's error, if any
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _consume(self, params: Mapping[str, Any], handler: Handler[T]) -> None:
        async for event in self.client.watch(self.path, params=params):
            self._last_event = self.clock.monotonic()
            etype = str(event.get("type", ""))
            raw = event.get("object") or {}
            if etype == "BOOKMARK":
                rv = _rv(raw)
                if rv:
                    self.resource_version = rv
                continue
            key = object_key(raw)
            rv = _rv(raw)
            if etype in ("ADDED", "MODIFIED"):
                old = self.store.get(key)
                obj = cast(T, lean(raw, old))
                self.store[key] = obj
                if rv:
                    self.resource_version = rv
                await self._call(handler, "MODIFIED" if old is not None else "ADDED", obj, old)
            elif etype == "DELETED":
                old = self.store.pop(key, None)
                obj = cast(T, lean(raw, old))
                if rv:
                    self.resource_version = rv
                await self._call(handler, "DELETED", obj, old)
            else:
                log.debug("watch %s: ignoring event type %r", self.path, etype)
            self._last_event = self.clock.monotonic()

    async def _call(self, handler: Handler[T], etype: str, obj: T, old: T | None) -> None:
        self._in_handler = True
        try:
            await handler(etype, obj, old)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watch %s: handler failed on %s %s", self.path, etype, object_key(obj))
        finally:
            self._in_handler = False


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")
