"""Pods whose template failed to render: retried when the templates change, not in a loop.

A ``TranslationError`` means the template (or the pod's data against it) is wrong — not a
transient backend problem — so rendering again right away gives the same error.  A pod whose
sync failed that way (Pending, reason ``TranslationFailed``) is therefore:

* **retried at once when the templates change.**  The renderer reports accepted template
  changes (``Renderer.subscribe``); the gateway side subscribes ``PodController.
  templates_changed`` to it (``gateway.app`` — translators never import gateway), and every pod
  whose *last* sync failed to translate is queued immediately, like a first attempt
  (``WorkQueue.add``: no backoff, not counted against the retry rate limit).
* **otherwise retried only as a backstop**, with long capped backoff (``BACKSTOP``: 60 s,
  120 s, 240 s, 480 s, then every 600 s, each +0..10 % jitter).  That is at most one render
  attempt per pod per minute, and ~6 an hour once capped.  The backstop is for changes no
  subscription sees: a file edited in a ``templates.dirs`` directory, a namespace moved to
  another team, the backend's settings.
* **held** when woken early for no reason that could change the render (``hold``): a watch
  event that only touched the status (e.g. the echo of our own status write racing the patch
  response), a relist after 410, …  Only a change of the pod's labels/annotations/spec, of a
  ConfigMap/Secret it references (the caller checks that), or of the templates lets it render
  before its backstop time.
* **reported with one Warning Event per distinct failure.**  The Event is recorded again (the
  ``EventRecorder`` aggregates it: ``count`` + 1, new ``lastTimestamp``) only when the message
  changes, when the templates changed since it was last recorded (a new version that still fails
  is news), or ``EVENT_REFRESH`` after the last one (so it stays visible: the API server's
  default Event TTL is 1 h).  The Pending status is only written when it changes.

A render that was in flight while the templates changed is retried at once too (it started
under a stale ``generation``), so a change can never be lost to that race.

This is the only place the rule lives: ``act.PodActor`` asks ``hold()`` before a sync (``decide``
holds the render while it says so) and ``failed()`` what to do after a ``TranslationError``;
``PodController`` calls ``changed()`` on a template change.

Internal to the pod sync (``gateway.pods``): its siblings and sub-packages import it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from vkgate_core.backoff import Backoff
from vkgate_core.clock import Clock

#: Backstop retry delays of a pod that failed to translate, while the templates do not change.
BACKSTOP = Backoff(base=60.0, cap=600.0, jitter=0.1, jitter_up=True)
#: Re-record an unchanged TranslationFailed Event at most this often (seconds).
EVENT_REFRESH = 1800.0


@dataclass(frozen=True)
class Verdict:
    """What to do after a failed translation: re-queue after ``delay``; record the Event?"""

    delay: float
    record_event: bool


@dataclass
class _Failure:
    uid: str
    message: str
    attempts: int
    event_at: float
    event_generation: int
    #: the pod's spec fingerprint and the template generation the failed render used
    spec: str
    generation: int
    #: monotonic time of the backstop retry
    due: float


class TranslationRetries:
    """The pods (by queue key ``ns/name``) whose last sync failed with ``TranslationError``."""

    def __init__(
        self,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        backstop: Backoff = BACKSTOP,
        event_refresh: float = EVENT_REFRESH,
    ) -> None:
        self.clock = clock
        self.backstop = backstop
        self.event_refresh = event_refresh
        self._rng = rng or random.Random()
        #: Grows with every template change; a sync notes it before rendering.
        self.generation = 0
        self._failing: dict[str, _Failure] = {}

    def hold(self, key: str, uid: str, spec: str) -> float | None:
        """Seconds ``key`` must still wait for its backstop retry, or None to render now:
        it is not failing, or its spec (``spec``: a fingerprint) or the templates changed."""
        f = self._failing.get(key)
        if f is None or f.uid != uid or f.spec != spec or f.generation != self.generation:
            return None
        left = f.due - self.clock.monotonic()
        return left if left > 0 else None

    def failed(self, key: str, uid: str, message: str, *, started: int, spec: str = "") -> Verdict:
        """The sync of ``key`` (pod ``uid``, spec fingerprint ``spec``), begun at template
        generation ``started``, failed to translate with ``message``."""
        now = self.clock.monotonic()
        prev = self._failing.get(key)
        if prev is not None and prev.uid != uid:
            prev = None  # a new pod under the same name
        attempts = 1 if prev is None else prev.attempts + 1
        record = (
            prev is None
            or prev.message != message
            or prev.event_generation != self.generation
            or now - prev.event_at >= self.event_refresh
        )
        if prev is None or record:
            event_at, event_generation = now, self.generation
        else:
            event_at, event_generation = prev.event_at, prev.event_generation
        stale = started != self.generation  # the templates changed during this render
        delay = 0.0 if stale else self.backstop.delay(attempts, self._rng)
        self._failing[key] = _Failure(
            uid, message, attempts, event_at, event_generation, spec, started, now + delay
        )
        return Verdict(delay, record)

    def succeeded(self, key: str) -> None:
        """``key`` translated (or is gone): it is no longer retried on template changes."""
        self._failing.pop(key, None)

    def forget(self, key: str, uid: str) -> None:
        """Pod ``uid`` was deleted; keep the entry if ``key`` now names a newer pod."""
        f = self._failing.get(key)
        if f is not None and f.uid == uid:
            del self._failing[key]

    def changed(self) -> dict[str, str]:
        """The templates changed: the pods to retry now (key → uid)."""
        self.generation += 1
        return {key: f.uid for key, f in self._failing.items()}

    def attempts(self, key: str) -> int:
        f = self._failing.get(key)
        return 0 if f is None else f.attempts

    def __contains__(self, key: object) -> bool:
        return key in self._failing

    def __len__(self) -> int:
        return len(self._failing)
