"""The Azure Batch client: azure-batch 15.x's async ``BatchClient`` behind a small typed facade.

Why a facade and not the SDK everywhere: three rules must hold for every call and live here once.

* **One error mapping.**  ``map_error`` turns azure-core / Batch errors into the
  ``translators.base`` tree through the shared ladder (translators/errors.py: 404 →
  ``BackendNotFound``, 409 → ``BackendConflict``, 401/403 → ``BackendAuthError``, 429 and 503
  ServerBusy → ``BackendThrottled(retry_after)``, other 5xx → ``BackendUnavailable``); Batch
  adds the rest: connection errors → ``BackendUnavailable``, 400/413 →
  ``BackendRejected(reason=<Batch code>)``.
* **Backoff is data.**  The SDK's own retry policy is switched off (``retry_total=0``: it would
  sleep on the real clock); ``RetryPolicy`` retries 429/503 (and 500 OperationTimedOut) with its
  delay steps, honouring ``Retry-After`` (capped), and sleeps through an injected function.  The
  wait is computed by the one retry policy (``vkgate_core.retry.RetryPolicy.wait``); *whether*
  to retry stays here, per operation, because it depends on Batch's error code in the body
  (docs/design/retry.md, "Azure Batch").
* **Plain JSON out.**  Callers get REST-shaped dicts (``executionInfo``, ``nodeInfo``…) so the
  status mapping and the golden files speak the documented wire format, not SDK model classes.

Transport: always ``HttpxTransport`` (an ``httpx.AsyncClient``); tests inject a client whose
transport is the stateful fake.  ``ocp-date`` is stamped by ``_OcpDatePolicy`` from an injectable
clock before the SDK's SharedKey policy signs the request.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import email.utils
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.core.rest import HttpRequest

from translators.base import (
    JSON,
    BackendAuthError,
    BackendError,
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
)
from translators.batch.settings import BatchSettings
from translators.batch.transport import HttpxTransport
from translators.errors import status_error
from vkgate_core.retry import RetryPolicy as HttpRetryPolicy
from vkgate_core.retry import parse_retry_after as retry_after_seconds

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
WallClock = Callable[[], _dt.datetime]

#: Fields one reconcile needs from every task (nothing secret: no env, no registry).
TASK_SELECT = (
    "id",
    "displayName",
    "state",
    "stateTransitionTime",
    "creationTime",
    "executionInfo",
    "nodeInfo",
)
NODE_SELECT = ("id", "state", "ipAddress", "vmSize", "isDedicated", "runningTaskSlotsCount")
POOL_SELECT = (
    "id",
    "vmSize",
    "taskSlotsPerNode",
    "state",
    "allocationState",
    "currentDedicatedNodes",
    "currentLowPriorityNodes",
    "targetDedicatedNodes",
    "targetLowPriorityNodes",
    "virtualMachineConfiguration",
)


# --------------------------------------------------------------------------- errors


def _code(exc: HttpResponseError) -> str:
    err = getattr(exc, "error", None)
    code = getattr(err, "code", None) if err is not None else None
    return str(code or "")


def _text(exc: HttpResponseError) -> str:
    err = getattr(exc, "error", None)
    msg = getattr(err, "message", None) if err is not None else None
    text = str(msg or exc.reason or "").strip().replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def map_error(exc: BaseException, *, what: str = "") -> BackendError:
    """The one mapping from azure-core / Batch errors into the translator error tree."""
    prefix = f"Azure Batch {what}: " if what else "Azure Batch: "
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        status = int(exc.status_code)
        code = _code(exc)
        message = f"{prefix}{status} {code}: {_text(exc)}".rstrip(": ")
        headers = getattr(exc.response, "headers", None) or {}
        return status_error(
            status,
            message,
            otherwise=lambda msg, st: BackendRejected(
                msg, status=st, reason=code or "BackendRejected"
            ),
            retry_after=retry_after_seconds(headers.get("retry-after")),
            busy=code in ("", "ServerBusy"),
        )
    if isinstance(exc, ClientAuthenticationError):
        return BackendAuthError(f"{prefix}authentication failed: {exc.message}")
    if isinstance(exc, (ServiceRequestError, ServiceResponseError, httpx.TransportError, OSError)):
        return BackendUnavailable(f"{prefix}unreachable: {exc}")
    return BackendUnavailable(f"{prefix}{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- retry

#: The policy has no jitter; ``wait`` still takes a generator.
_NO_JITTER = random.Random(0)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff as data: retry throttling/busy answers with these delays (Retry-After wins)."""

    delays: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    statuses: frozenset[int] = frozenset({429, 503})
    #: 500 with one of these codes is the service saying "busy" too.
    codes: frozenset[str] = frozenset({"ServerBusy", "OperationTimedOut"})
    max_retry_after: float = 60.0

    def delay(self, attempt: int, err: BackendError) -> float | None:
        """Seconds to wait before retry ``attempt`` (0-based), or None: give up."""
        if not self.retryable(err):
            return None
        after = err.retry_after if isinstance(err, BackendThrottled) else None
        timing = HttpRetryPolicy(delays=self.delays, max_retry_after=self.max_retry_after)
        return timing.wait(attempt, after, _NO_JITTER)

    def retryable(self, err: BackendError) -> bool:
        if err.status in self.statuses:
            return True
        return err.status == 500 and any(c in str(err) for c in self.codes)


async def _real_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class _OcpDatePolicy(SansIOHTTPPolicy[HttpRequest, Any]):
    """Stamp ``ocp-date`` from our clock (the SharedKey policy signs it, the service checks it)."""

    def __init__(self, now: WallClock) -> None:
        super().__init__()
        self._now = now

    def on_request(self, request: PipelineRequest[HttpRequest]) -> None:
        request.http_request.headers["ocp-date"] = email.utils.format_datetime(
            self._now().astimezone(_dt.UTC), usegmt=True
        )


def _as_json(model: Any) -> JSON:
    if model is None:
        return {}
    if hasattr(model, "as_dict"):
        out: JSON = model.as_dict()
        return out
    return dict(model)


# --------------------------------------------------------------------------- client


def make_credential(settings: BatchSettings, http_client: httpx.AsyncClient) -> Any:
    """Shared key, or azure-identity's ``DefaultAzureCredential`` (docs/design/batch.md, "Credentials").

    The credential's token requests go through ``http_client`` too: azure-core's default async
    transport needs aiohttp, which vkgate does not install, so without this every token request
    of the identity path would fail.  The transport does not own the client (the Batch client
    closes it).
    """
    if settings.auth == "azure_identity":
        from azure.identity.aio import DefaultAzureCredential

        return DefaultAzureCredential(transport=HttpxTransport(http_client, owns_client=False))
    return AzureNamedKeyCredential(settings.account_name, settings.account_key)


class BatchApi:
    """The Batch calls vkgate makes, with retries and error mapping, returning plain JSON."""

    def __init__(
        self,
        settings: BatchSettings,
        *,
        http_client: httpx.AsyncClient | None = None,
        credential: Any = None,
        sleep: Sleep | None = None,
        now: WallClock | None = None,
    ) -> None:
        self.settings = settings
        self.retry = RetryPolicy(
            delays=settings.retry_delays, max_retry_after=settings.max_retry_after
        )
        self._sleep = sleep or _real_sleep
        self._now = now or _utcnow
        self._http_client = http_client
        self._credential = credential
        self._sdk: Any = None
        #: Calls made, by operation name (tests and metrics read it).
        self.calls: dict[str, int] = {}

    @property
    def sdk(self) -> Any:
        """The SDK client, built on first use (offline rendering never opens a connection)."""
        if self._sdk is None:
            from azure.batch.aio import BatchClient

            client = self._http_client or httpx.AsyncClient(
                timeout=httpx.Timeout(self.settings.request_timeout)
            )
            if self._credential is None:
                self._credential = make_credential(self.settings, client)
            kwargs: dict[str, Any] = {
                "transport": HttpxTransport(client),
                "retry_total": 0,
                "per_call_policies": [_OcpDatePolicy(self._now)],
                # azure-core logs every request's headers at INFO; vkgate logs its own calls.
                "http_logging_policy": SansIOHTTPPolicy(),
            }
            if self.settings.api_version:
                kwargs["api_version"] = self.settings.api_version
            self._sdk = BatchClient(self.settings.endpoint, self._credential, **kwargs)
        return self._sdk

    @property
    def api_version(self) -> str:
        return str(self.settings.api_version or self.sdk._config.api_version)

    async def close(self) -> None:
        if self._sdk is None:
            if self._http_client is not None:
                await self._http_client.aclose()
            return
        closer = getattr(self._credential, "close", None)
        if closer is not None:
            await closer()
        await self._sdk.close()

    async def _call(self, op: str, fn: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            self.calls[op] = self.calls.get(op, 0) + 1
            try:
                return await fn()
            except Exception as exc:  # mapped below; nothing escapes unmapped
                err = map_error(exc, what=op)
                delay = self.retry.delay(attempt, err)
                if delay is None:
                    raise err from exc
                log.info("Batch %s throttled (%s); retrying in %.1fs", op, err.status, delay)
                await self._sleep(delay)
                attempt += 1

    # -- jobs ------------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JSON:
        async def go() -> JSON:
            return _as_json(
                await self.sdk.get_job(
                    job_id, select=["id", "state", "poolInfo", "usesTaskDependencies"]
                )
            )

        return await self._call("get_job", go)

    async def create_job(self, body: JSON) -> None:
        from azure.batch.models import BatchJobCreateOptions

        async def go() -> None:
            await self.sdk.create_job(BatchJobCreateOptions(body))

        await self._call("create_job", go)

    # -- tasks -----------------------------------------------------------------------------

    async def add_collection(self, job_id: str, tasks: Sequence[JSON]) -> list[JSON]:
        """One add-task-collection call; per-task results (``status``, ``taskId``, ``error``)."""
        from azure.batch.models import BatchTaskCreateOptions, BatchTaskGroup

        group = BatchTaskGroup(task_values=[BatchTaskCreateOptions(dict(t)) for t in tasks])

        async def go() -> list[JSON]:
            result = await self.sdk.create_task_collection(job_id, group)
            values: list[JSON] = list(_as_json(result).get("value", []) or [])
            return values

        return await self._call("add_collection", go)

    async def list_tasks(
        self, job_id: str, *, filter: str | None = None, select: Sequence[str] = TASK_SELECT
    ) -> list[JSON]:
        async def go() -> list[JSON]:
            pager = self.sdk.list_tasks(job_id, filter=filter, select=list(select))
            return [_as_json(t) async for t in pager]

        return await self._call("list_tasks", go)

    async def get_task(self, job_id: str, task_id: str) -> JSON:
        async def go() -> JSON:
            return _as_json(await self.sdk.get_task(job_id, task_id, select=list(TASK_SELECT)))

        return await self._call("get_task", go)

    async def delete_task(self, job_id: str, task_id: str) -> bool:
        """Delete (a running task is terminated by the service).  False when it did not exist."""

        async def go() -> None:
            await self.sdk.delete_task(job_id, task_id)

        try:
            await self._call("delete_task", go)
        except BackendNotFound:
            return False
        return True

    async def terminate_task(self, job_id: str, task_id: str) -> None:
        async def go() -> None:
            await self.sdk.terminate_task(job_id, task_id)

        await self._call("terminate_task", go)

    # -- files -----------------------------------------------------------------------------

    async def file_size(self, job_id: str, task_id: str, path: str) -> int:
        async def go() -> int:
            props = await self.sdk.get_task_file_properties(job_id, task_id, path)
            return int(getattr(props, "content_length", 0) or 0)

        return await self._call("file_properties", go)

    async def read_file(self, job_id: str, task_id: str, path: str, start: int, end: int) -> bytes:
        """Bytes ``start..end`` inclusive (``ocp-range``)."""

        async def go() -> bytes:
            stream = await self.sdk.download_task_file(
                job_id, task_id, path, ocp_range=f"bytes={start}-{end}"
            )
            return b"".join([chunk async for chunk in stream])

        return await self._call("read_file", go)

    # -- pools -----------------------------------------------------------------------------

    async def get_pool(self, pool_id: str) -> JSON:
        async def go() -> JSON:
            return _as_json(await self.sdk.get_pool(pool_id, select=list(POOL_SELECT)))

        return await self._call("get_pool", go)

    async def list_nodes(self, pool_id: str) -> list[JSON]:
        async def go() -> list[JSON]:
            pager = self.sdk.list_nodes(pool_id, select=list(NODE_SELECT))
            return [_as_json(n) async for n in pager]

        return await self._call("list_nodes", go)
