"""A small stateful Nomad (HTTP API v1) for the contract suite, answering with Nomad's own JSON.

Every object it serves is built from JSON captured from a ``nomad agent -dev``: allocations
and job stubs from the golden states (tests/golden/nomad/states: ``running``, ``succeeded``,
``failed-exit-3``, ``stopped``; a pending allocation is ``running`` cut before its ``Started``
event), the client node and a foreign job's allocation from
tests/unit/translators/nomad/nomad-1.6.3-clients.json.  Only identities (IDs, job, namespace,
node, task names) and the Raft indexes are rewritten, so the translator reads exactly the
fields a real Nomad sends.

What it keeps: registered jobs (by namespace and ID) and their allocations.  A registered job
gets a pending allocation at once (the scheduler is quick on an idle cluster); ``advance()``
moves it to running and then, as the pod's outcome says, to complete (exit 0), failed (exit 3)
or leaves it running.  A stop (``DELETE /v1/job/:id``) marks the job stopped and its live
allocations complete with the SIGTERM exit (the ``stopped`` capture); a purge does the same and
removes the job, its allocations stay listed (by ``GET /v1/job/:id/allocations`` too) until
``collect()``, Nomad's garbage collection.  ``filter`` expressions are evaluated (``==``, ``!=``, ``matches``,
``and``, ``or``, parentheses: what vkgate sends); blocking queries answer at once.  A request
the fake does not know is answered 404 and recorded in ``unknown`` (the harness fails on any).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx

JSON = dict[str, Any]
TESTS = Path(__file__).resolve().parents[2]
STATES = TESTS / "golden" / "nomad" / "states"
CLIENTS = TESTS / "unit" / "translators" / "nomad" / "nomad-1.6.3-clients.json"
TERMINAL = frozenset({"complete", "failed", "lost"})
#: outcome → the captured state a finished allocation is copied from
FINISHED = {"succeed": "succeeded", "fail": "failed-exit-3"}


def _captured(name: str) -> JSON:
    doc: JSON = json.loads((STATES / f"{name}.nomad.json").read_text())
    return doc


# --------------------------------------------------------------------------- filter expressions

_TOKEN = re.compile(r'\s*(\(|\)|\[|\]|==|!=|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_.]*)')


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"fake Nomad cannot parse filter {text!r} at {pos}")
        out.append(m.group(1))
        pos = m.end()
    return out


def compile_filter(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate for Nomad's filter language, as far as vkgate uses it."""
    toks = _tokens(text)
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = toks[pos]
        if expected is not None and tok != expected:
            raise ValueError(f"filter {text!r}: expected {expected!r}, got {tok!r}")
        pos += 1
        return tok

    def peek() -> str:
        return toks[pos] if pos < len(toks) else ""

    def factor() -> Callable[[Mapping[str, Any]], bool]:
        if peek() == "(":
            take("(")
            inner = expr()
            take(")")
            return inner
        field, key = take(), None
        if peek() == "[":
            take("[")
            key = json.loads(take())
            take("]")
        op, value = take(), json.loads(take())

        def get(obj: Mapping[str, Any]) -> Any:
            v = obj.get(field)
            return (v or {}).get(key) if key is not None else v

        if op == "==":
            return lambda obj: get(obj) == value
        if op == "!=":
            return lambda obj: get(obj) != value
        if op == "matches":
            return lambda obj: re.search(value, str(get(obj) or "")) is not None
        raise ValueError(f"filter {text!r}: unknown operator {op!r}")

    def term() -> Callable[[Mapping[str, Any]], bool]:
        parts = [factor()]
        while peek() == "and":
            take()
            parts.append(factor())
        return lambda obj: all(p(obj) for p in parts)

    def expr() -> Callable[[Mapping[str, Any]], bool]:
        parts = [term()]
        while peek() == "or":
            take()
            parts.append(term())
        return lambda obj: any(p(obj) for p in parts)

    predicate = expr()
    if pos != len(toks):
        raise ValueError(f"filter {text!r}: trailing {toks[pos:]}")
    return predicate


# --------------------------------------------------------------------------- the fake


class FakeNomad:
    def __init__(self) -> None:
        clients = json.loads(CLIENTS.read_text())
        self.nodes: list[JSON] = clients["nodes"]
        self.node = self.nodes[0]
        self.index = 1000
        #: (namespace, job ID) → the registered job, with the server's fields
        self.jobs: dict[tuple[str, str], JSON] = {}
        #: allocation ID → allocation (the captured foreign one first)
        self.allocs: dict[str, JSON] = {a["ID"]: a for a in clients["allocations"]}
        #: pod UID → what its container does (the harness says)
        self.outcomes: dict[str, str] = {}
        #: what every started task wrote to stdout
        self.stdout = b""
        self.requests: list[httpx.Request] = []
        self.unknown: list[str] = []
        #: (namespace, path) → items of the Nomad Variables written (a job's files and Secret env)
        self.variables: dict[tuple[str, str], dict[str, str]] = {}
        self.down = False
        #: (namespace, job ID) → purged jobs, for their allocations (``allocs_of``, ``advance``)
        self.purged: dict[tuple[str, str], JSON] = {}
        #: True: a stopped task handles SIGTERM at once (its allocation is complete within the
        #: stop); False: it keeps running, DesiredStatus "stop", until the next ``advance()``
        self.sigterm_ends = True
        self._captures = {
            name: _captured(name) for name in ("running", "stopped", *FINISHED.values())
        }

    # -- control --------------------------------------------------------------------------

    def _bump(self) -> int:
        self.index += 1
        return self.index

    def jobs_of(self, uid: str) -> list[JSON]:
        return [j for j in self.jobs.values() if (j.get("Meta") or {}).get("k8s.uid") == uid]

    def allocs_of(self, uid: str) -> list[JSON]:
        """The pod's allocations, also those of its purged job."""
        jobs = {**self.purged, **self.jobs}
        return [
            a
            for a in self.allocs.values()
            if (jobs.get((a["Namespace"], a["JobID"])) or {}).get("Meta", {}).get("k8s.uid") == uid
        ]

    def collect(self) -> None:
        """Nomad's garbage collection: the ended allocations of purged jobs go."""
        for aid, a in list(self.allocs.items()):
            if (a["Namespace"], a["JobID"]) not in self.jobs and a["ClientStatus"] in TERMINAL:
                del self.allocs[aid]

    def advance(self) -> None:
        """One scheduler/client step for every live allocation: pending → running → outcome."""
        for a in list(self.allocs.values()):
            key = (a["Namespace"], a["JobID"])
            job = self.jobs.get(key) or self.purged.get(key)
            if job is None or a["ClientStatus"] in TERMINAL:
                continue
            if a.get("DesiredStatus") == "stop":
                self._replace(a, job, "stopped")  # SIGTERM handled at last
                continue
            if job["Stop"]:
                continue
            uid = (job.get("Meta") or {}).get("k8s.uid", "")
            if a["ClientStatus"] == "pending":
                self._replace(a, job, "running")
            elif self.outcomes.get(uid, "run") in FINISHED:
                self._replace(a, job, FINISHED[self.outcomes[uid]])
        for job in self.jobs.values():
            self._job_status(job)

    # -- objects ---------------------------------------------------------------------------

    def _tasks(self, job: JSON) -> list[str]:
        return [t["Name"] for g in job.get("TaskGroups") or [] for t in g.get("Tasks") or []]

    def _replace(self, alloc: JSON, job: JSON, capture: str, *, pending: bool = False) -> None:
        """Make ``alloc`` the captured allocation of ``capture``, with this job's identities."""
        src = copy.deepcopy(self._captures[capture]["allocations"][0])
        state = (src.get("TaskStates") or {}).get("app") or {}
        if pending:
            src.update(ClientStatus="pending", ClientDescription="No tasks have started")
            events = state.get("Events") or []
            state = {
                **state,
                "State": "pending",
                "StartedAt": None,
                "FinishedAt": None,
                "Events": events[: next(i for i, e in enumerate(events) if e["Type"] == "Started")],
            }
        index = self._bump()
        src.update(
            ID=alloc["ID"],
            JobID=job["ID"],
            Namespace=job["Namespace"],
            Name=f"{job['ID']}.{job['TaskGroups'][0]['Name']}[0]",
            TaskGroup=job["TaskGroups"][0]["Name"],
            JobType=job.get("Type", "service"),
            NodeID=self.node["ID"],
            NodeName=self.node["Name"],
            CreateIndex=alloc.get("CreateIndex", index),
            ModifyIndex=index,
            TaskStates={t: copy.deepcopy(state) for t in self._tasks(job)},
        )
        alloc.clear()
        alloc.update(src)

    def _job_status(self, job: JSON) -> None:
        allocs = [a for a in self.allocs.values() if a["JobID"] == job["ID"]]
        if job["Stop"] or (allocs and all(a["ClientStatus"] in TERMINAL for a in allocs)):
            status = "dead"
        elif any(a["ClientStatus"] == "running" for a in allocs):
            status = "running"
        else:
            status = "pending"
        if status != job["Status"]:
            job.update(Status=status, ModifyIndex=self._bump())

    def _stub(self, job: JSON, *, meta: bool) -> JSON:
        """A ``JobListStub`` as ``GET /v1/jobs`` gives it (captured, identities rewritten)."""
        stub = copy.deepcopy(self._captures["running"]["job"])
        for key in ("ID", "Name", "Namespace", "Type", "Priority", "Datacenters", "Status"):
            stub[key] = job.get(key, stub.get(key))
        for key in ("Stop", "CreateIndex", "ModifyIndex", "JobModifyIndex", "SubmitTime"):
            stub[key] = job[key]
        stub["JobSummary"].update(JobID=job["ID"], Namespace=job["Namespace"])
        if meta:
            stub["Meta"] = dict(job.get("Meta") or {})
        else:
            stub.pop("Meta", None)
        return stub

    # -- HTTP -------------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.requests.append(request)
        path = request.url.path.removeprefix("/v1")
        q = dict(parse_qsl(request.url.query.decode(), keep_blank_values=True))
        parts = [p for p in path.split("/") if p]
        route = self._route(request.method, parts, q, request)
        if route is None:
            self.unknown.append(f"{request.method} {request.url}")
            return httpx.Response(404, text="fake Nomad: no such endpoint")
        return route

    def _ok(self, body: Any) -> httpx.Response:
        return httpx.Response(200, json=body, headers={"X-Nomad-Index": str(self.index)})

    def _in_ns(self, obj: Mapping[str, Any], q: Mapping[str, str]) -> bool:
        ns = q.get("namespace", "default")
        return ns == "*" or obj.get("Namespace", "default") == ns

    def _filtered(self, items: list[JSON], q: Mapping[str, str]) -> list[JSON]:
        items = [i for i in items if self._in_ns(i, q)]
        if q.get("filter"):
            keep = compile_filter(q["filter"])
            items = [i for i in items if keep(i)]
        if q.get("per_page"):
            items = items[: int(q["per_page"])]
        return items

    def _job(self, jid: str, q: Mapping[str, str]) -> JSON | None:
        return self.jobs.get((q.get("namespace", "default"), jid))

    def _route(
        self, method: str, parts: list[str], q: Mapping[str, str], request: httpx.Request
    ) -> httpx.Response | None:
        match method, parts:
            case "GET", ["status", "leader"]:
                return self._ok("127.0.0.1:4647")
            case "GET", ["agent", "health"]:
                ok = {"ok": True, "message": "ok"}
                return self._ok({"client": ok, "server": ok})
            case "GET", ["nodes"]:
                return self._ok(self.nodes)
            case "GET", ["node", node_id]:
                node = next((n for n in self.nodes if n["ID"] == node_id), None)
                return self._ok(node) if node else httpx.Response(404, text="node not found")
            case "GET", ["jobs"]:
                stubs = [self._stub(j, meta=q.get("meta") == "true") for j in self.jobs.values()]
                return self._ok(self._filtered(stubs, q))
            case "POST", ["jobs"]:
                req = json.loads(request.content)
                if req.get("EnforceIndex"):  # Nomad's check (nomad/job_endpoint.go, Register)
                    known = self._job(
                        req["Job"]["ID"], {"namespace": req["Job"].get("Namespace") or "default"}
                    )
                    jmi = int(req.get("JobModifyIndex") or 0)
                    if known is not None and jmi == 0:
                        return httpx.Response(
                            500, text="Enforcing job modify index 0: job already exists"
                        )
                    if known is not None and jmi != known["JobModifyIndex"]:
                        return httpx.Response(
                            500,
                            text=f"Enforcing job modify index {jmi}: job exists with"
                            f" conflicting job modify index: {known['JobModifyIndex']}",
                        )
                    if known is None and jmi != 0:
                        return httpx.Response(
                            500, text=f"Enforcing job modify index {jmi}: job does not exist"
                        )
                return self._register(req["Job"])
            case "POST", ["job", _, "plan"]:
                return self._ok({"Annotations": {"DesiredTGUpdates": {}}, "Index": 0})
            case "GET", ["job", jid]:
                job = self._job(jid, q)
                return self._ok(job) if job else httpx.Response(404, text="job not found")
            case "GET", ["job", jid, "allocations"]:
                # also a purged job's: Nomad lists allocations by job ID, job or not
                ns = q.get("namespace") or "default"
                allocs = [
                    a
                    for a in self.allocs.values()
                    if a["JobID"] == jid and (ns == "*" or a["Namespace"] == ns)
                ]
                return self._ok(allocs)
            case "GET", ["job", jid, "evaluations"]:
                return self._ok([])
            case "GET", ["evaluations"]:
                return self._ok([])  # nothing blocked: every job fits
            case "DELETE", ["job", jid]:
                return self._deregister(jid, q)
            case "GET", ["allocations"]:
                allocs = self._filtered(list(self.allocs.values()), q)
                if q.get("task_states") == "false":
                    allocs = [{**a, "TaskStates": None} for a in allocs]
                return self._ok(allocs)
            case "GET", ["allocation", alloc_id]:
                alloc = self.allocs.get(alloc_id)
                return self._ok(alloc) if alloc else httpx.Response(404, text="alloc not found")
            case "POST", ["client", "allocation", alloc_id, "signal"]:
                return self._ok({})
            case "GET", ["client", "fs", "ls", alloc_id]:
                return self._ls(alloc_id)
            case "GET", ["client", "fs", "logs", alloc_id]:
                return self._logs(alloc_id, q)
            case "PUT", ["var", *path]:
                body = json.loads(request.content)
                self.variables[(q.get("namespace", "default"), "/".join(path))] = body["Items"]
                return self._ok({**body, "ModifyIndex": self._bump()})
            case "DELETE", ["var", *path]:
                self.variables.pop((q.get("namespace", "default"), "/".join(path)), None)
                return self._ok(None)
        return None

    def _register(self, body: JSON) -> httpx.Response:
        ns = body.get("Namespace") or "default"
        key = (ns, body["ID"])
        index = self._bump()
        old = self.jobs.get(key)
        job = {
            **body,
            "Namespace": ns,
            "Region": body.get("Region") or "global",
            "Status": "pending",
            "Stop": False,
            "Version": old["Version"] + 1 if old else 0,
            "CreateIndex": old["CreateIndex"] if old else index,
            "ModifyIndex": index,
            "JobModifyIndex": index,
            "SubmitTime": 1795339074368722000 + index,
        }
        self.jobs[key] = job
        live = [
            a
            for a in self.allocs.values()
            if a["JobID"] == job["ID"] and a["ClientStatus"] not in TERMINAL
        ]
        if not live:
            alloc: JSON = {"ID": str(uuid.uuid4())}
            self._replace(alloc, job, "running", pending=True)
            self.allocs[alloc["ID"]] = alloc
        eval_id = str(uuid.uuid4())
        return self._ok(
            {"EvalID": eval_id, "EvalCreateIndex": index, "JobModifyIndex": index, "Warnings": ""}
        )

    def _deregister(self, jid: str, q: Mapping[str, str]) -> httpx.Response:
        job = self._job(jid, q)
        if job is None:
            return httpx.Response(404, text="job not found")
        allocs = [a for a in self.allocs.values() if a["JobID"] == jid]
        job.update(Stop=True, ModifyIndex=self._bump())
        for a in allocs:
            if a["ClientStatus"] in TERMINAL or not self.sigterm_ends:
                a.update(DesiredStatus="stop", ModifyIndex=self._bump())
            else:  # the task handles SIGTERM at once (the ``stopped`` capture: exit 143)
                self._replace(a, job, "stopped")
        if q.get("purge") == "true":
            # the job is gone; its allocations stop as for a stop and stay listed under its
            # ID until Nomad's garbage collection (``collect()`` here), as on a real agent
            self.purged[(job["Namespace"], jid)] = self.jobs.pop((job["Namespace"], jid))
        else:
            self._job_status(job)
        return self._ok({"EvalID": str(uuid.uuid4()), "JobModifyIndex": self._bump()})

    def _started(self, alloc_id: str) -> bool:
        alloc = self.allocs.get(alloc_id)
        return alloc is not None and alloc["ClientStatus"] != "pending"

    def _ls(self, alloc_id: str) -> httpx.Response:
        if alloc_id not in self.allocs:
            return httpx.Response(404, text="unknown allocation")
        job = self.jobs.get((self.allocs[alloc_id]["Namespace"], self.allocs[alloc_id]["JobID"]))
        size = len(self.stdout) if self._started(alloc_id) else 0
        entries = []
        for task in self._tasks(job or {}):
            for kind, n in (("stdout", size), ("stderr", 0)):
                entries.append({"Name": f"{task}.{kind}.0", "IsDir": False, "Size": n})
        return self._ok(entries)

    def _logs(self, alloc_id: str, q: Mapping[str, str]) -> httpx.Response:
        alloc = self.allocs.get(alloc_id)
        if alloc is None:
            return httpx.Response(404, text="unknown allocation")
        if q.get("task") not in (alloc.get("TaskStates") or {}):
            return httpx.Response(400, text=f"unknown task name {q.get('task')!r}")
        data = self.stdout if q.get("type") == "stdout" and self._started(alloc_id) else b""
        offset = int(q.get("offset") or 0)
        if q.get("origin", "start") == "start":
            data = data[offset:]
        else:
            data = data[max(0, len(data) - offset) :]
        if not data:
            return httpx.Response(200, content=b"")
        frame = {
            "File": f"alloc/logs/{q['task']}.{q['type']}.0",
            "Offset": len(data),
            "Data": base64.b64encode(data).decode(),
        }
        return httpx.Response(200, content=json.dumps(frame).encode())
