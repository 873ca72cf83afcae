"""A stateful fake of the Azure Batch data-plane REST API, built from the public reference.

It is an ``httpx`` handler (``FakeBatch.handle``) so the real SDK pipeline runs against it through
``httpx.MockTransport`` — SharedKey signing, ``api-version``, the SDK's error policy and paging
are all exercised — and ``serve_loopback`` puts the same object behind a 127.0.0.1 HTTP server for
end-to-end tests with a gateway subprocess.

What it implements (docs/design/batch.md, "REST facts", and the REST reference):

* **SharedKey validation** computed like the service: VERB, the eleven standard headers
  (Content-Length as received), ``ocp-*`` headers sorted, ``/<account><path>`` and the decoded
  query parameters (lower-case names, sorted).  A mismatch, a missing header or an ``ocp-date``
  more than 15 minutes away from the fake's clock answers ``403 AuthenticationFailed``.
* **Jobs** (``POST /jobs``, ``GET /jobs/{id}``; 409 ``JobExists``), **pools** with nodes
  (``GET /pools/{id}``, ``GET /pools/{id}/nodes``).
* **Tasks**: add (201 / 409 ``TaskExists``), add-task-collection (≤ ``max_collection_tasks`` and
  body ≤ ``max_collection_bytes`` else ``413 RequestBodyTooLarge``; per-task ``success`` /
  ``clienterror``), get, list (``$filter`` on the documented list-tasks properties, ``$select``,
  ``maxresults`` and ``odata.nextLink`` continuation), delete, terminate.
* **Lifecycle** driven by ``step()`` (a controllable clock): active → preparing → running →
  completed with ``exitCode``/``result``/``failureInfo``; retries back to active with
  ``retryCount`` per ``constraints.maxTaskRetryCount``; ``dependsOn`` (blocked until parents
  succeed); slots per node (``requiredSlots`` ≤ free ``taskSlotsPerNode``); ``maxWallClockTime``.
* **Task files** ``stdout.txt``/``stderr.txt`` (404 before the task runs) with ``ocp-range`` /
  ``Range`` byte ranges and ``HEAD`` properties.
* **Faults**: ``fail_next(...)`` answers the next matching requests with e.g. 429 + Retry-After.

Behaviour of a task comes from ``script(prefix, Behaviour(...))`` (matched on displayName) or
from ``FAKE_BATCH_*`` environment settings of the task (``FAKE_BATCH_EXIT_CODES=1,0``,
``FAKE_BATCH_STDOUT``, ``FAKE_BATCH_RUN_STEPS``, ``FAKE_BATCH_PULL_ERROR=1``); by default a task
exits 0 after one running step and ``echo`` is emulated (its words go to stdout.txt).
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import email.utils
import hashlib
import hmac
import json
import re
import secrets
import shlex
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fake_odata import ODataError, parse_filter

JSON = dict[str, Any]
SIGNED_HEADERS = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)
TASK_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_COMMAND_LINE = 32_768
FILTERABLE_TASK = {
    "state",
    "statetransitiontime",
    "creationtime",
    "lastmodified",
    "executioninfo/starttime",
    "executioninfo/endtime",
    "executioninfo/exitcode",
}


def _iso(t: _dt.datetime) -> str:
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rfc1123(t: _dt.datetime) -> str:
    return email.utils.format_datetime(t.astimezone(_dt.UTC), usegmt=True)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


@dataclass
class Behaviour:
    """How a fake task behaves once it runs."""

    #: Exit code per attempt; the last one repeats.
    exit_codes: list[int] = field(default_factory=lambda: [0])
    #: Steps spent running before the command exits.
    run_steps: int = 1
    preparing_steps: int = 1
    stdout: bytes = b""
    stderr: bytes = b""
    #: Appended to stdout.txt, one per running step (for follow tests).
    stdout_chunks: list[bytes] = field(default_factory=list)
    #: Complete without an exit code with this failureInfo (e.g. image pull failure).
    failure: JSON | None = None
    #: Never finish running (until deleted/terminated).
    forever: bool = False


PULL_FAILURE: JSON = {
    "category": "usererror",
    "code": "ContainerInvalidImage",
    "message": "One or more container images specified are invalid",
    "details": [{"name": "Message", "value": "pull access denied for nosuch/image"}],
}


@dataclass
class Node:
    id: str
    ip: str
    state: str = "idle"
    dedicated: bool = True
    used_slots: int = 0

    def json(self, pool: Pool) -> JSON:
        return {
            "id": self.id,
            "url": f"/pools/{pool.id}/nodes/{self.id}",
            "state": self.state,
            "schedulingState": "enabled",
            "ipAddress": self.ip,
            "vmSize": pool.vm_size,
            "isDedicated": self.dedicated,
            "runningTaskSlotsCount": self.used_slots,
            "runningTasksCount": self.used_slots,
            "totalTasksRun": 0,
        }


@dataclass
class Pool:
    id: str
    vm_size: str
    slots: int
    container_type: str
    nodes: list[Node]
    state: str = "active"
    allocation_state: str = "steady"

    def json(self) -> JSON:
        out: JSON = {
            "id": self.id,
            "url": f"/pools/{self.id}",
            "state": self.state,
            "allocationState": self.allocation_state,
            "vmSize": self.vm_size,
            "taskSlotsPerNode": self.slots,
            "currentDedicatedNodes": sum(1 for n in self.nodes if n.dedicated),
            "currentLowPriorityNodes": sum(1 for n in self.nodes if not n.dedicated),
            "targetDedicatedNodes": sum(1 for n in self.nodes if n.dedicated),
            "targetLowPriorityNodes": sum(1 for n in self.nodes if not n.dedicated),
            "virtualMachineConfiguration": {
                "imageReference": {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc"},
                "nodeAgentSKUId": "batch.node.ubuntu 22.04",
            },
        }
        if self.container_type:
            out["virtualMachineConfiguration"]["containerConfiguration"] = {
                "type": self.container_type
            }
        return out


@dataclass
class TaskRec:
    body: JSON
    behaviour: Behaviour
    seq: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    files_at: _dt.datetime | None = None
    steps_in_state: int = 0
    node: Node | None = None
    attempt: int = 0


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    code: str
    times: int
    retry_after: str | None


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    body_bytes: int


class FakeBatch:
    def __init__(
        self,
        *,
        account: str = "vkgatetest",
        key: str | None = None,
        endpoint: str = "",
        start: _dt.datetime | None = None,
        page_size: int = 1000,
        max_collection_tasks: int = 100,
        max_collection_bytes: int = 1_048_576,
        date_skew: _dt.timedelta | None = _dt.timedelta(minutes=15),
    ) -> None:
        self.account = account
        self.key = key or base64.b64encode(secrets.token_bytes(32)).decode()
        self.endpoint = endpoint or f"https://{account}.westeurope.batch.azure.com"
        self.now = start or _dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=_dt.UTC)
        self.page_size = page_size
        self.max_collection_tasks = max_collection_tasks
        self.max_collection_bytes = max_collection_bytes
        self.date_skew = date_skew
        self.pools: dict[str, Pool] = {}
        self.jobs: dict[str, JSON] = {}
        self.tasks: dict[str, dict[str, TaskRec]] = {}
        self.calls: list[Call] = []
        #: Microsoft Entra access tokens accepted as ``Authorization: Bearer`` (identity path).
        self.bearer_tokens: set[str] = set()
        self.bearer_requests = 0
        #: Requests that reached the API (past authentication), for body assertions.
        self.received: list[httpx.Request] = []
        self.auth_failures = 0
        self._faults: list[Fault] = []
        self._scripts: list[tuple[Callable[[JSON], bool], Behaviour]] = []
        self._seq = 0
        self._etag = 0
        self.lock = threading.RLock()

    # ================================================================ control (tests)

    def add_pool(
        self,
        pool_id: str = "pool-1",
        *,
        vm_size: str = "standard_d4s_v3",
        slots: int = 4,
        nodes: int = 2,
        low_priority: int = 0,
        container_type: str = "dockerCompatible",
        node_states: list[str] | None = None,
    ) -> Pool:
        node_list = [
            Node(id=f"tvmps_{pool_id}_{i:03d}", ip=f"10.0.0.{4 + i}", dedicated=i < nodes)
            for i in range(nodes + low_priority)
        ]
        for node, state in zip(node_list, node_states or [], strict=False):
            node.state = state
        pool = Pool(pool_id, vm_size, slots, container_type, node_list)
        self.pools[pool_id.lower()] = pool
        return pool

    def script(self, match: str | Callable[[JSON], bool], behaviour: Behaviour) -> None:
        """Tasks whose displayName starts with ``match`` (or for which it is true) behave so."""
        if isinstance(match, str):
            prefix = match
            self._scripts.append(
                (lambda t: str(t.get("displayName", "")).startswith(prefix), behaviour)
            )
        else:
            self._scripts.append((match, behaviour))

    def fail_next(
        self,
        method: str,
        path_regex: str,
        *,
        status: int = 429,
        code: str = "TooManyRequests",
        times: int = 1,
        retry_after: str | None = None,
    ) -> None:
        self._faults.append(
            Fault(method.upper(), re.compile(path_regex), status, code, times, retry_after)
        )

    def count(self, method: str, path_suffix: str) -> int:
        return sum(
            1
            for c in self.calls
            if c.method == method and c.path.lower().endswith(path_suffix.lower())
        )

    def task(self, job_id: str, task_id: str) -> JSON:
        return self.tasks[job_id.lower()][task_id.lower()].body

    def all_tasks(self, job_id: str) -> list[JSON]:
        return [
            r.body for r in sorted(self.tasks.get(job_id.lower(), {}).values(), key=lambda r: r.seq)
        ]

    def step(self, n: int = 1, *, seconds: float = 1.0) -> None:
        """Advance the clock and move every task one lifecycle step."""
        with self.lock:
            for _ in range(n):
                self.now += _dt.timedelta(seconds=seconds)
                for job_id, tasks in self.tasks.items():
                    job = self.jobs.get(job_id)
                    if job is None:
                        continue
                    for rec in sorted(tasks.values(), key=lambda r: r.seq):
                        self._advance(job, rec)

    def settle(self, limit: int = 50) -> None:
        """Step until no task is active/preparing/running (or ``limit`` steps)."""
        for _ in range(limit):
            if all(
                r.body["state"] == "completed" or r.behaviour.forever
                for tasks in self.tasks.values()
                for r in tasks.values()
            ):
                return
            self.step()

    # ================================================================ lifecycle

    def _behaviour(self, body: JSON) -> Behaviour:
        for match, behaviour in self._scripts:
            if match(body):
                return copy.deepcopy(behaviour)
        env = {e.get("name"): e.get("value", "") for e in body.get("environmentSettings") or []}
        b = Behaviour()
        if env.get("FAKE_BATCH_EXIT_CODES"):
            b.exit_codes = [int(x) for x in env["FAKE_BATCH_EXIT_CODES"].split(",")]
        if env.get("FAKE_BATCH_RUN_STEPS"):
            b.run_steps = int(env["FAKE_BATCH_RUN_STEPS"])
        if env.get("FAKE_BATCH_STDOUT"):
            b.stdout = env["FAKE_BATCH_STDOUT"].encode()
        if env.get("FAKE_BATCH_PULL_ERROR"):
            b.failure = PULL_FAILURE
        if not b.stdout:
            b.stdout = self._echo(body)
        return b

    @staticmethod
    def _echo(body: JSON) -> bytes:
        """Emulate ``echo``: the image's entrypoint or first word being echo."""
        opts = shlex.split(
            (body.get("containerSettings") or {}).get("containerRunOptions", "") or ""
        )
        argv = shlex.split(body.get("commandLine", "") or "")
        entry = ""
        if "--entrypoint" in opts and opts.index("--entrypoint") + 1 < len(opts):
            entry = opts[opts.index("--entrypoint") + 1]
        elif argv:
            entry, argv = argv[0], argv[1:]
        if entry.rsplit("/", 1)[-1] == "echo":
            return (" ".join(argv) + "\n").encode()
        return b""

    def _touch(self, rec: TaskRec, state: str | None = None) -> None:
        body = rec.body
        self._etag += 1
        body["eTag"] = f"0x8DE{self._etag:012X}"
        body["lastModified"] = _iso(self.now)
        if state is not None and state != body["state"]:
            body["previousState"] = body["state"]
            body["previousStateTransitionTime"] = body["stateTransitionTime"]
            body["state"] = state
            body["stateTransitionTime"] = _iso(self.now)
            rec.steps_in_state = 0

    def _free(self, rec: TaskRec) -> None:
        if rec.node is not None:
            rec.node.used_slots -= int(rec.body.get("requiredSlots") or 1)
            rec.node.state = "running" if rec.node.used_slots > 0 else "idle"
            rec.node = None

    def _max_retries(self, job: JSON, rec: TaskRec) -> int:
        c = rec.body.get("constraints") or {}
        if "maxTaskRetryCount" in c and c["maxTaskRetryCount"] is not None:
            return int(c["maxTaskRetryCount"])
        return int((job.get("constraints") or {}).get("maxTaskRetryCount", 0))

    def _parents_ok(self, job_id: str, rec: TaskRec) -> bool:
        deps = (rec.body.get("dependsOn") or {}).get("taskIds") or []
        tasks = self.tasks.get(job_id, {})
        for d in deps:
            parent = tasks.get(str(d).lower())
            if parent is None or parent.body["state"] != "completed":
                return False
            if (parent.body.get("executionInfo") or {}).get("result") != "success":
                return False
        return True

    def _advance(self, job: JSON, rec: TaskRec) -> None:
        body = rec.body
        state = body["state"]
        rec.steps_in_state += 1
        b = rec.behaviour
        ei = body.setdefault("executionInfo", {"retryCount": 0, "requeueCount": 0})
        if state == "active":
            if not self._parents_ok(job["id"].lower(), rec):
                return
            pool = self.pools.get(str((job.get("poolInfo") or {}).get("poolId", "")).lower())
            need = int(body.get("requiredSlots") or 1)
            node = None
            if pool is not None:
                node = next(
                    (
                        n
                        for n in pool.nodes
                        if n.state in ("idle", "running") and pool.slots - n.used_slots >= need
                    ),
                    None,
                )
            if node is None or pool is None:
                return
            node.used_slots += need
            node.state = "running"
            rec.node = node
            body["nodeInfo"] = {
                "affinityId": f"TVM:{node.id}",
                "nodeUrl": f"{self.endpoint}/pools/{pool.id}/nodes/{node.id}",
                "poolId": pool.id,
                "nodeId": node.id,
                "taskRootDirectory": f"workitems/{job['id']}/job-1/{body['id']}",
                "taskRootDirectoryUrl": f"{self.endpoint}/pools/{pool.id}/nodes/{node.id}/files/workitems/{job['id']}/job-1/{body['id']}",
            }
            self._touch(rec, "preparing")
        elif state == "preparing":
            if rec.steps_in_state < b.preparing_steps:
                return
            ei["startTime"] = _iso(self.now)
            ei.pop("endTime", None)
            if b.failure is not None:
                ei["failureInfo"] = copy.deepcopy(b.failure)
                ei["result"] = "failure"
                ei["endTime"] = _iso(self.now)
                ei["containerInfo"] = {"error": b.failure.get("message", "")}
                self._free(rec)
                self._touch(rec, "completed")
                return
            ei["containerInfo"] = {"containerId": secrets.token_hex(8), "state": "running"}
            if rec.files_at is None:
                rec.files_at = self.now
            rec.stdout += b.stdout
            rec.stderr += b.stderr
            self._touch(rec, "running")
        elif state == "running":
            if rec.steps_in_state - 1 < len(b.stdout_chunks):
                rec.stdout += b.stdout_chunks[rec.steps_in_state - 1]
            wall = (body.get("constraints") or {}).get("maxWallClockTime")
            started = ei.get("startTime")
            if wall and started:
                limit = _parse_duration(wall)
                begun = _dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
                if limit is not None and self.now - begun > limit:
                    self._finish(job, rec, -1, wallclock=True)
                    return
            if b.forever or rec.steps_in_state < b.run_steps:
                return
            code = b.exit_codes[min(rec.attempt, len(b.exit_codes) - 1)]
            self._finish(job, rec, code)

    def _finish(self, job: JSON, rec: TaskRec, code: int, *, wallclock: bool = False) -> None:
        body = rec.body
        ei = body["executionInfo"]
        ei["exitCode"] = code
        ei["endTime"] = _iso(self.now)
        ei.setdefault("containerInfo", {})["state"] = "exited"
        self._free(rec)
        if code == 0 and not wallclock:
            ei["result"] = "success"
            ei.pop("failureInfo", None)
            self._touch(rec, "completed")
            return
        retries = self._max_retries(job, rec)
        if not wallclock and (retries == -1 or ei.get("retryCount", 0) < retries):
            ei["retryCount"] = int(ei.get("retryCount", 0)) + 1
            ei["lastRetryTime"] = _iso(self.now)
            rec.attempt += 1
            self._touch(rec, "active")
            return
        ei["result"] = "failure"
        ei["failureInfo"] = (
            {
                "category": "usererror",
                "code": "MaxWallClockTimeExpiry",
                "message": "The task exceeded its maximum wall clock time",
            }
            if wallclock
            else {
                "category": "usererror",
                "code": "FailureExitCode",
                "message": "The task exited with an exit code representing a failure",
                "details": [{"name": "Message", "value": f"The task exited with exit code {code}"}],
            }
        )
        self._touch(rec, "completed")

    # ================================================================ HTTP

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            raw_path = request.url.raw_path.decode().split("?", 1)[0]
            query = {
                k: v
                for k, v in urllib.parse.parse_qsl(
                    request.url.query.decode(), keep_blank_values=True
                )
            }
            self.calls.append(
                Call(request.method, urllib.parse.unquote(raw_path), query, len(request.content))
            )
            try:
                self._authenticate(request, raw_path)
                self.received.append(request)
                if "api-version" not in query:
                    raise ApiError(400, "MissingRequiredQueryParameter", "api-version is required")
                self._fault(request.method, urllib.parse.unquote(raw_path))
                return self._route(request, urllib.parse.unquote(raw_path), query)
            except ApiError as exc:
                return self._error(exc)

    def _error(self, exc: ApiError) -> httpx.Response:
        body = {
            "odata.metadata": f"{self.endpoint}/$metadata#Microsoft.Azure.Batch.Protocol.Entities.Container.errors/@Element",
            "code": exc.code,
            "message": {"lang": "en-US", "value": exc.message},
        }
        headers = {"content-type": "application/json;odata=minimalmetadata", **exc.headers}
        return httpx.Response(exc.status, headers=headers, content=json.dumps(body).encode())

    def _fault(self, method: str, path: str) -> None:
        for f in self._faults:
            if f.times > 0 and f.method == method and f.pattern.search(path):
                f.times -= 1
                headers = {"Retry-After": f.retry_after} if f.retry_after is not None else {}
                raise ApiError(f.status, f.code, f"injected {f.status} {f.code}", headers)

    # -- SharedKey -------------------------------------------------------------------------

    def string_to_sign(self, request: httpx.Request, raw_path: str) -> str:
        h = {k.lower(): v for k, v in request.headers.items()}
        lines = [request.method] + [h.get(name, "") for name in SIGNED_HEADERS]
        out = "\n".join(lines) + "\n"
        for name in sorted(k for k in h if k.startswith("ocp-")):
            out += f"{name}:{h[name]}\n"
        out += f"/{self.account}{raw_path}"
        params: dict[str, list[str]] = {}
        for k, v in urllib.parse.parse_qsl(request.url.query.decode(), keep_blank_values=False):
            params.setdefault(k.lower(), []).append(v)
        for name in sorted(params):
            out += f"\n{name}:{','.join(sorted(params[name]))}"
        return out

    def sign(self, text: str) -> str:
        digest = hmac.new(base64.b64decode(self.key), text.encode(), hashlib.sha256).digest()
        return base64.b64encode(digest).decode()

    def _authenticate(self, request: httpx.Request, raw_path: str) -> None:
        fail = ApiError(
            403,
            "AuthenticationFailed",
            "Server failed to authenticate the request. Make sure the value of Authorization "
            "header is correctly formed including the signature.",
        )
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer "):
            if auth[len("Bearer ") :] not in self.bearer_tokens:
                self.auth_failures += 1
                raise ApiError(401, "InvalidAuthenticationTokenTenant", "unknown token")
            self.bearer_requests += 1
            return
        prefix = f"SharedKey {self.account}:"
        if not auth.startswith(prefix):
            self.auth_failures += 1
            raise fail
        expected = self.sign(self.string_to_sign(request, raw_path))
        if not hmac.compare_digest(auth[len(prefix) :], expected):
            self.auth_failures += 1
            raise fail
        date = request.headers.get("ocp-date") or request.headers.get("date")
        if self.date_skew is not None:
            when = email.utils.parsedate_to_datetime(date) if date else None
            if when is None or abs(when - self.now) > self.date_skew:
                self.auth_failures += 1
                raise ApiError(
                    403, "AuthenticationFailed", "Request date is outside the allowed skew"
                )

    # -- routing ---------------------------------------------------------------------------

    def _route(self, request: httpx.Request, path: str, q: dict[str, str]) -> httpx.Response:
        parts = [p for p in path.split("/") if p]
        m = request.method
        lower = [p.lower() for p in parts]
        if lower[:1] == ["pools"] and len(parts) == 2 and m == "GET":
            return self._json(200, _select(self._pool(parts[1]).json(), q))
        if lower[:1] == ["pools"] and len(parts) == 3 and lower[2] == "nodes" and m == "GET":
            pool = self._pool(parts[1])
            return self._page(request, [n.json(pool) for n in pool.nodes], q)
        if lower == ["jobs"] and m == "POST":
            return self._add_job(request)
        if lower[:1] == ["jobs"] and len(parts) == 2 and m == "GET":
            return self._json(200, _select(self._job(parts[1]), q))
        if lower[:1] == ["jobs"] and len(parts) == 3 and lower[2] == "tasks":
            if m == "POST":
                return self._add_task(parts[1], request)
            if m == "GET":
                return self._list_tasks(parts[1], request, q)
        if (
            lower[:1] == ["jobs"]
            and len(parts) == 3
            and lower[2] == "addtaskcollection"
            and m == "POST"
        ):
            return self._add_collection(parts[1], request)
        if lower[:1] == ["jobs"] and len(parts) == 4 and lower[2] == "tasks":
            rec = self._task(parts[1], parts[3])
            if m == "GET":
                return self._json(200, _select(self._public(rec.body), q))
            if m == "DELETE":
                self._free(rec)
                del self.tasks[parts[1].lower()][parts[3].lower()]
                return httpx.Response(200)
        if (
            lower[:1] == ["jobs"]
            and len(parts) == 5
            and lower[2] == "tasks"
            and lower[4] == "terminate"
            and m == "POST"
        ):
            return self._terminate(parts[1], parts[3])
        if (
            lower[:1] == ["jobs"]
            and len(parts) >= 6
            and lower[2] == "tasks"
            and lower[4] == "files"
        ):
            return self._file(request, parts[1], parts[3], "/".join(parts[5:]))
        raise ApiError(404, "InvalidUri", f"{m} {path} is not a Batch operation the fake knows")

    def _json(
        self, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        h = {"content-type": "application/json;odata=minimalmetadata", **(headers or {})}
        return httpx.Response(status, headers=h, content=json.dumps(body).encode())

    def _pool(self, pool_id: str) -> Pool:
        pool = self.pools.get(pool_id.lower())
        if pool is None:
            raise ApiError(404, "PoolNotFound", "The specified pool does not exist.")
        return pool

    def _job(self, job_id: str) -> JSON:
        job = self.jobs.get(job_id.lower())
        if job is None:
            raise ApiError(404, "JobNotFound", "The specified job does not exist.")
        return job

    def _task(self, job_id: str, task_id: str) -> TaskRec:
        self._job(job_id)
        rec = self.tasks.get(job_id.lower(), {}).get(task_id.lower())
        if rec is None:
            raise ApiError(404, "TaskNotFound", "The specified task does not exist.")
        return rec

    @staticmethod
    def _body(request: httpx.Request) -> Any:
        try:
            return json.loads(request.content or b"null")
        except json.JSONDecodeError as exc:
            raise ApiError(
                400, "InvalidRequestBody", f"The request body is not valid JSON: {exc}"
            ) from None

    # -- jobs ------------------------------------------------------------------------------

    def _add_job(self, request: httpx.Request) -> httpx.Response:
        body = self._body(request)
        if not isinstance(body, dict) or not TASK_ID.match(str(body.get("id", ""))):
            raise ApiError(400, "InvalidPropertyValue", "The job id is invalid.")
        if not (body.get("poolInfo") or {}).get("poolId"):
            raise ApiError(400, "MissingRequiredProperty", "poolInfo is required.")
        if body["id"].lower() in self.jobs:
            raise ApiError(409, "JobExists", "The specified job already exists.")
        job = dict(body)
        job.update(
            state="active",
            creationTime=_iso(self.now),
            stateTransitionTime=_iso(self.now),
            url=f"{self.endpoint}/jobs/{body['id']}",
            onAllTasksComplete=body.get("onAllTasksComplete", "noaction"),
            usesTaskDependencies=bool(body.get("usesTaskDependencies", False)),
        )
        self.jobs[body["id"].lower()] = job
        self.tasks.setdefault(body["id"].lower(), {})
        return httpx.Response(201, headers={"DataServiceId": job["url"], "Location": job["url"]})

    # -- tasks -----------------------------------------------------------------------------

    def _validate_task(self, job: JSON, t: Any) -> None:
        if not isinstance(t, dict):
            raise ApiError(400, "InvalidRequestBody", "A task must be a JSON object.")
        if not TASK_ID.match(str(t.get("id", ""))):
            raise ApiError(400, "InvalidPropertyValue", f"The task id {t.get('id')!r} is invalid.")
        cmd = t.get("commandLine")
        if not isinstance(cmd, str):
            raise ApiError(400, "MissingRequiredProperty", "commandLine is required.")
        if len(cmd) > MAX_COMMAND_LINE:
            raise ApiError(400, "InvalidPropertyValue", "commandLine is too long.")
        if len(str(t.get("displayName", ""))) > 1024:
            raise ApiError(400, "InvalidPropertyValue", "displayName is too long.")
        pool = self.pools.get(str((job.get("poolInfo") or {}).get("poolId", "")).lower())
        containers = bool(pool and pool.container_type)
        cs = t.get("containerSettings")
        if containers and not cs:
            raise ApiError(
                400, "InvalidPropertyValue", "containerSettings is required on a container pool."
            )
        if not containers and cs:
            raise ApiError(
                400, "InvalidPropertyValue", "containerSettings is only allowed on container pools."
            )
        if cs and not cs.get("imageName"):
            raise ApiError(
                400, "MissingRequiredProperty", "containerSettings.imageName is required."
            )
        reg = (cs or {}).get("registry")
        if reg is not None and (
            not isinstance(reg, dict)
            or (
                not reg.get("identityReference")
                and not (reg.get("username") and reg.get("password"))
            )
        ):
            raise ApiError(
                400,
                "InvalidPropertyValue",
                "containerSettings.registry needs username and password (or identityReference).",
            )
        if t.get("dependsOn") and not job.get("usesTaskDependencies"):
            raise ApiError(
                400, "TaskDependenciesNotSpecifiedOnJob", "The job does not use task dependencies."
            )
        slots = int(t.get("requiredSlots") or 1)
        if pool is not None and slots > pool.slots:
            raise ApiError(400, "InvalidPropertyValue", "requiredSlots exceeds taskSlotsPerNode.")

    def _insert(self, job: JSON, t: JSON) -> TaskRec:
        jid = job["id"].lower()
        if t["id"].lower() in self.tasks.setdefault(jid, {}):
            raise ApiError(409, "TaskExists", "The specified task already exists.")
        body = copy.deepcopy(t)
        body.update(
            url=f"{self.endpoint}/jobs/{job['id']}/tasks/{t['id']}",
            creationTime=_iso(self.now),
            state="active",
            stateTransitionTime=_iso(self.now),
            executionInfo={"retryCount": 0, "requeueCount": 0},
        )
        self._seq += 1
        rec = TaskRec(body=body, behaviour=self._behaviour(body), seq=self._seq)
        self._touch(rec)
        self.tasks[jid][t["id"].lower()] = rec
        return rec

    def _add_task(self, job_id: str, request: httpx.Request) -> httpx.Response:
        job = self._job(job_id)
        t = self._body(request)
        self._validate_task(job, t)
        rec = self._insert(job, t)
        return httpx.Response(
            201, headers={"ETag": rec.body["eTag"], "DataServiceId": rec.body["url"]}
        )

    def _add_collection(self, job_id: str, request: httpx.Request) -> httpx.Response:
        job = self._job(job_id)
        if len(request.content) > self.max_collection_bytes:
            raise ApiError(
                413,
                "RequestBodyTooLarge",
                "The request body is too large and exceeds the maximum permissible limit.",
            )
        body = self._body(request)
        values = (body or {}).get("value") if isinstance(body, dict) else None
        if not isinstance(values, list) or not values:
            raise ApiError(400, "InvalidRequestBody", "value must be a non-empty list of tasks.")
        if len(values) > self.max_collection_tasks:
            raise ApiError(
                413,
                "RequestBodyTooLarge",
                f"A task collection holds at most {self.max_collection_tasks} tasks.",
            )
        results = []
        for t in values:
            tid = t.get("id") if isinstance(t, dict) else None
            try:
                self._validate_task(job, t)
                rec = self._insert(job, t)
                results.append(
                    {
                        "status": "success",
                        "taskId": tid,
                        "eTag": rec.body["eTag"],
                        "lastModified": rec.body["lastModified"],
                        "location": rec.body["url"],
                    }
                )
            except ApiError as exc:
                results.append(
                    {
                        "status": "clienterror" if exc.status < 500 else "servererror",
                        "taskId": tid,
                        "error": {
                            "code": exc.code,
                            "message": {"lang": "en-US", "value": exc.message},
                        },
                    }
                )
        return self._json(200, {"value": results})

    def _public(self, body: JSON) -> JSON:
        out = copy.deepcopy(body)
        reg = (out.get("containerSettings") or {}).get("registry")
        if isinstance(reg, dict):
            reg.pop("password", None)  # write-only, like the service
        return out

    def _list_tasks(self, job_id: str, request: httpx.Request, q: dict[str, str]) -> httpx.Response:
        self._job(job_id)
        items = [self._public(b) for b in self.all_tasks(job_id)]
        if q.get("$filter"):
            try:
                pred = parse_filter(q["$filter"], FILTERABLE_TASK)
            except ODataError as exc:
                raise ApiError(400, "InvalidQueryParameterValue", str(exc)) from None
            items = [t for t in items if pred(t)]
        return self._page(request, items, q)

    def _page(self, request: httpx.Request, items: list[JSON], q: dict[str, str]) -> httpx.Response:
        size = min(int(q.get("maxresults", 1000) or 1000), self.page_size)
        start = (
            int(base64.urlsafe_b64decode(q["$skiptoken"]).decode()) if q.get("$skiptoken") else 0
        )
        page = [_select(t, q) for t in items[start : start + size]]
        out: JSON = {"odata.metadata": f"{self.endpoint}/$metadata", "value": page}
        if start + size < len(items):
            keep = {k: v for k, v in q.items() if k not in ("api-version", "$skiptoken")}
            keep["$skiptoken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
            base = f"{request.url.scheme}://{request.url.netloc.decode()}{request.url.path}"
            out["odata.nextLink"] = (
                f"{base}?{urllib.parse.urlencode(keep, quote_via=urllib.parse.quote)}"
            )
        return self._json(200, out)

    def _terminate(self, job_id: str, task_id: str) -> httpx.Response:
        rec = self._task(job_id, task_id)
        if rec.body["state"] != "completed":
            ei = rec.body.setdefault("executionInfo", {})
            ei["result"] = "failure"
            ei["endTime"] = _iso(self.now)
            ei["failureInfo"] = {
                "category": "usererror",
                "code": "TaskEnded",
                "message": "Task Was Ended by User Request",
            }
            self._free(rec)
            self._touch(rec, "completed")
        return httpx.Response(204)

    # -- files -----------------------------------------------------------------------------

    def _file(self, request: httpx.Request, job_id: str, task_id: str, path: str) -> httpx.Response:
        rec = self._task(job_id, task_id)
        if rec.files_at is None or path not in ("stdout.txt", "stderr.txt"):
            raise ApiError(404, "FileNotFound", f"The specified file {path} does not exist.")
        data = bytes(rec.stdout if path == "stdout.txt" else rec.stderr)
        headers = {
            "ocp-creation-time": _rfc1123(rec.files_at),
            "Last-Modified": _rfc1123(self.now),
            "ocp-batch-file-isdirectory": "False",
            "ocp-batch-file-url": f"{self.endpoint}/jobs/{job_id}/tasks/{task_id}/files/{path}",
            "ocp-batch-file-mode": "0o100644",
            "content-type": "application/octet-stream",
        }
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return httpx.Response(200, headers=headers)
        if request.method != "GET":
            raise ApiError(405, "UnsupportedHttpVerb", "Only GET and HEAD are supported for files.")
        rng = request.headers.get("ocp-range") or request.headers.get("range")
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if not m:
                raise ApiError(400, "InvalidRange", f"Invalid range {rng!r}.")
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else len(data) - 1
            if start >= len(data) or end < start:
                raise ApiError(
                    416,
                    "InvalidRange",
                    "The range specified is invalid for the current size of the resource.",
                )
            data = data[start : min(end, len(data) - 1) + 1]
        return httpx.Response(200, headers=headers, content=data)


# ==================================================================== OData helpers


def _select(item: JSON, q: dict[str, str]) -> JSON:
    sel = q.get("$select")
    if not sel:
        return item
    wanted = {s.strip().lower() for s in sel.split(",") if s.strip()}
    return {k: v for k, v in item.items() if k.lower() in wanted}


def _parse_duration(value: str) -> _dt.timedelta | None:
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", value)
    if not m:
        return None
    d, h, mi, s = m.groups()
    return _dt.timedelta(
        days=int(d or 0), hours=int(h or 0), minutes=int(mi or 0), seconds=float(s or 0)
    )


# ==================================================================== loopback server


class LoopbackServer:
    """``fake`` behind a real HTTP/1.1 server on 127.0.0.1 (for a gateway subprocess)."""

    def __init__(self, fake: FakeBatch, *, auto_step: float | None = 0.3) -> None:
        import http.server

        self.fake = fake
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                content = self.rfile.read(length) if length else b""
                url = f"http://{self.headers.get('Host', '127.0.0.1')}{self.path}"
                req = httpx.Request(
                    self.command, url, headers=list(self.headers.items()), content=content
                )
                resp = owner.fake.handle(req)
                body = resp.content
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() in ("content-length", "transfer-encoding", "connection"):
                        continue
                    self.send_header(k, v)
                if self.command == "HEAD":
                    self.send_header("Content-Length", resp.headers.get("content-length", "0"))
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = do_PATCH = _serve

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.httpd.serve_forever, daemon=True)]
        if auto_step:
            self._threads.append(
                threading.Thread(target=self._stepper, args=(auto_step,), daemon=True)
            )

    def _stepper(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.fake.step(seconds=interval)

    def __enter__(self) -> LoopbackServer:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for t in self._threads:
            t.join(timeout=5)


def iter_calls(fake: FakeBatch, method: str, suffix: str) -> Iterator[Call]:
    return (c for c in fake.calls if c.method == method and c.path.lower().endswith(suffix.lower()))
