"""Capture the Nomad golden states and API payloads from a real ``nomad agent -dev`` (1.6.3).

Run from the repository root, as root (the docker states need a private dockerd), inside a
private network namespace so nothing leaves loopback::

    .venv/bin/python -m devstack.netns -- \\
        .venv/bin/python -m tests.golden.nomad.nomad_capture [--only NAME,...] [--no-docker]

What it starts: one dev agent from the pinned build (``devstack.nomad.launch_nomad``,
raw_exec enabled) with the docker driver pointed at a private dockerd
(``devstack.docker``: ``launch_dockerd`` + ``make_busybox_image``; ``--no-docker``
or no dockerd skips the docker cases).

What it writes (existing files are overwritten; review with ``git diff``):

``states-1.6.3/<name>.nomad.json``
    One file per state of ``states/`` (captured from 1.11.3), same shape: the job stub
    (``/v1/jobs?meta=true``), the allocations (stubs from ``/v1/job/:id/allocations``, or the
    full ``/v1/allocation/:id`` without ``Job`` where the 1.11.3 file holds full ones), the
    evaluations where the 1.11.3 file has them, ``node_ips``, ``pod`` (the 1.11.3 file's pod:
    same identity, so the same job ID) and a ``note``.  Each job is the pod rendered by vkgate
    (``render_job`` with the packaged templates, ``nomad/raw_exec.j2`` or ``nomad/job.j2``),
    with the command the situation needs (recorded under ``capture``).  States the 1.11.3
    capture derived (lost, unknown, rescheduled, oom-killed, setup-failure, not-placed,
    image-pull, image-pull-backoff) are derived the same way from the 1.6.3 captures.  Two
    more states exist only here: ``docker-image-pull-first`` and ``docker-image-pull-again``,
    snapshots of ``docker-image-missing`` after its first and second failed pull.
``api-1.6.3/``
    ``events-<state>.ndjson`` (the raw ``/v1/event/stream`` bytes of that state's job, a
    heartbeat included) and ``events-<state>-resume.ndjson`` (reconnected at an earlier index);
    ``logs.json`` (log frames of a restarted task, ``/v1/client/fs/ls`` between and after the
    runs, error replies); ``exec.json`` (exec WebSocket frames and close codes, raw_exec and
    docker); ``nodes.json`` (``/v1/nodes?resources=true``, ``/v1/node/:id``, vkgate's job list
    query and the capacity allocation query); ``literal.json`` (Nomad's answers to unescaped
    interpolation, for docs/design/nomad.md "What Nomad interpolates").
``metrics-1.6.3/<name>.nomad.json``
    Allocation stats samples in the shape of ``metrics/`` (raw_exec and docker).

Prints how long each phase took.  Measured on 2 shared cores with both drivers: ~75 s in all
(agent and dockerd 2 s, event streams 31 s — each waits for a heartbeat, ~10 s apart —, states
6 s, API 19 s, literal 14 s).  ``--only states,api`` (etc.) runs some phases; a phase reads only
what it captures itself, except that ``api`` needs no state.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import datetime as _dt
import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from devstack.docker import Dockerd, launch_dockerd, make_busybox_image
from devstack.nomad import NomadAgent, launch_nomad
from devstack.process import BinaryUnavailable
from gateway.templating.offline import parse_inputs, resolve
from translators.nomad import NomadTranslator
from translators.nomad.capacity import HELD_FILTER, mhz_per_core
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.render.engine import Renderer

JSON = dict[str, Any]
HERE = Path(__file__).resolve().parent
OLD = HERE / "states"
NEW = HERE / "states-1.6.3"
API = HERE / "api-1.6.3"
METRICS = HERE / "metrics-1.6.3"
VERSION = "1.6.3"
NODE_IP = "192.0.2.10"  # what the 1.11.3 files put in node_ips (a documentation address)
RAW = "nomad/raw_exec.j2"
DOCKER = "nomad/job.j2"
MISSING_IMAGE = "127.0.0.1:1/vkgate/missing:1"  # nothing listens on port 1: the pull fails
TODAY = _dt.datetime.now(_dt.UTC).date().isoformat()


def dump(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def old(name: str) -> JSON:
    doc: JSON = json.loads((OLD / f"{name}.nomad.json").read_text())
    return doc


# --------------------------------------------------------------------------- Nomad HTTP


class Api:
    def __init__(self, address: str) -> None:
        self.address = address
        self.http = httpx.Client(base_url=address, timeout=30, trust_env=False)

    def get(self, route: str, /, **params: Any) -> Any:
        r = self.http.get("/v1" + route, params=params)
        r.raise_for_status()
        return r.json()

    def raw(self, route: str, /, **params: Any) -> tuple[int, str]:
        r = self.http.get("/v1" + route, params=params)
        return r.status_code, r.text

    def register(self, job: JSON) -> None:
        r = self.http.post("/v1/jobs", json=job)
        if r.status_code != 200:
            raise RuntimeError(f"register {job['Job']['ID']}: {r.status_code} {r.text}")

    def stop(self, job_id: str) -> None:
        self.http.delete(f"/v1/job/{job_id}").raise_for_status()

    def stub(self, job_id: str) -> JSON:
        for j in self.get("/jobs", meta="true", prefix=job_id):
            if j["ID"] == job_id:
                found: JSON = j
                return found
        raise RuntimeError(f"job {job_id} not listed")

    def allocs(self, job_id: str) -> list[JSON]:
        out: list[JSON] = self.get(f"/job/{job_id}/allocations")
        return sorted(out, key=lambda a: int(a["CreateIndex"]), reverse=True)


# --------------------------------------------------------------------------- pods and jobs


def pod_with(pod: Mapping[str, Any], commands: Mapping[str, Sequence[str]]) -> JSON:
    """The pod to submit: ``pod`` with a command for the named containers."""
    out = copy.deepcopy(dict(pod))
    spec = out["spec"]
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        if c["name"] in commands:
            c["command"] = list(commands[c["name"]])
    return out


def rendered(
    pod: Mapping[str, Any], *, node: str, settings: Mapping[str, Any], factor: float
) -> JSON:
    inputs = parse_inputs(json.dumps(pod), source=str(pod["metadata"]["name"]))
    res = resolve(inputs, node_name=node, features=NomadTranslator.features, backend="nomad")
    if res.pod is None or res.errors:
        raise RuntimeError(f"{pod['metadata']['name']}: {res.errors}")
    cfg = NomadConfig.from_settings(dict(settings), environ={})
    return render_job(res.pod, renderer=Renderer(), cfg=cfg, settings=settings, factor=factor)


def unescape(value: Any) -> Any:
    """Undo ``literal.py``'s escaping in a driver Config (what vkgate submitted before it)."""
    if isinstance(value, str):
        return value.replace("$${", "${").replace("%%{", "%{")
    if isinstance(value, list):
        return [unescape(v) for v in value]
    if isinstance(value, dict):
        return {k: unescape(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- state cases


def events(alloc: Mapping[str, Any], task: str = "app") -> list[JSON]:
    return list(((alloc.get("TaskStates") or {}).get(task) or {}).get("Events") or [])


def types(alloc: Mapping[str, Any], task: str = "app") -> list[str]:
    return [str(e.get("Type")) for e in events(alloc, task)]


def task(alloc: Mapping[str, Any], name: str = "app") -> JSON:
    ts: JSON = (alloc.get("TaskStates") or {}).get(name) or {}
    return ts


@dataclass
class Snap:
    job: JSON
    allocs: list[JSON]
    evals: list[JSON]

    @property
    def alloc(self) -> JSON:
        return self.allocs[0] if self.allocs else {}


Check = Callable[[Snap], bool]


def status_is(*wanted: str) -> Check:
    return lambda s: bool(s.allocs) and s.alloc["ClientStatus"] in wanted


def running_task(s: Snap) -> bool:
    return bool(s.allocs) and s.alloc["ClientStatus"] == "running" and "Started" in types(s.alloc)


@dataclass
class Case:
    """One pod run on the agent; ``shots`` = (file name, condition, what it shows) written the
    first time the condition holds; ``act`` = (condition, action) steps run once each."""

    name: str  # the state (and the 1.11.3 file) this case captures
    template: str
    commands: Mapping[str, Sequence[str]]
    shots: list[tuple[str, Check, str]]
    interval: str = "30m"
    act: list[tuple[Check, Callable[[Api, str], None]]] = field(default_factory=list)
    unescaped: bool = False
    pod: JSON | None = None  # default: the 1.11.3 file's pod
    timeout: float = 120.0
    # filled while running
    job_id: str = ""
    done_acts: int = 0
    written: set[str] = field(default_factory=set)
    settings: JSON = field(default_factory=dict)

    @property
    def driver(self) -> str:
        return "docker" if self.template == DOCKER else "raw_exec"

    def source_pod(self) -> JSON:
        return copy.deepcopy(self.pod) if self.pod is not None else old(self.name)["pod"]

    def node(self) -> str:
        if self.pod is not None:
            return "vk-capture"
        return str(old(self.name)["job"]["Meta"]["vkgate.node"])


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def restart_count(n: int, kind: str = "Restarting") -> Check:
    def check(s: Snap) -> bool:
        ts = types(s.alloc) if s.allocs else []
        return bool(ts) and ts[-1] == kind and ts.count("Restarting") == n

    return check


def pulls_failed(n: int) -> Check:
    def check(s: Snap) -> bool:
        ts = types(s.alloc) if s.allocs else []
        return bool(ts) and ts[-1] == "Restarting" and ts.count("Driver Failure") == n

    return check


def init_sidecar_up(s: Snap) -> bool:
    if not s.allocs or s.alloc["ClientStatus"] != "running":
        return False
    return (
        task(s.alloc, "setup").get("State") == "dead"
        and task(s.alloc, "proxy").get("State") == "running"
        and task(s.alloc, "app").get("State") == "running"
    )


def stop_job(api: Api, job_id: str) -> None:
    api.stop(job_id)


def stopped_done(s: Snap) -> bool:
    return bool(s.allocs) and (s.alloc["ClientStatus"], s.alloc["DesiredStatus"]) == (
        "complete",
        "stop",
    )


def blocked(s: Snap) -> bool:
    return any(e.get("Status") == "blocked" for e in s.evals) and len(s.evals) >= 2


def once_then_sleep(code: int) -> list[str]:
    return sh(
        'if [ -e "$NOMAD_ALLOC_DIR/ran" ]; then exec sleep 3600; fi; '
        f'touch "$NOMAD_ALLOC_DIR/ran"; exit {code}'
    )


SLEEP = sh("exec sleep 3600")


def state_cases() -> list[Case]:
    return [
        Case(
            "docker-image-missing",
            DOCKER,
            {},
            [
                (
                    "docker-image-pull-first",
                    pulls_failed(1),
                    "docker-image-missing after its first failed pull (the state image-pull.nomad.json derives)",
                ),
                (
                    "docker-image-pull-again",
                    pulls_failed(2),
                    "docker-image-missing after its second failed pull (the state image-pull-backoff.nomad.json derives)",
                ),
                (
                    "docker-image-missing",
                    pulls_failed(3),
                    "image not present, the pull from a closed loopback registry fails and Nomad retries",
                ),
            ],
            interval="1m",
            timeout=180,
        ),
        Case(
            "running", RAW, {"app": SLEEP}, [("running", running_task, "service job, task running")]
        ),
        Case(
            "succeeded",
            RAW,
            {"app": sh("exit 0")},
            [("succeeded", status_is("complete"), "restartPolicy Never, exit 0")],
        ),
        Case(
            "failed-exit-3",
            RAW,
            {"app": sh("exit 3")},
            [("failed-exit-3", status_is("failed"), "restartPolicy Never, exit 3")],
        ),
        Case(
            "crashloop",
            RAW,
            {"app": sh("exit 1")},
            [
                (
                    "crashloop",
                    restart_count(2),
                    "service job, task exited 1 twice and waits to restart (last event Restarting)",
                )
            ],
        ),
        Case(
            "restarted-running",
            RAW,
            {"app": once_then_sleep(2)},
            [
                (
                    "restarted-running",
                    lambda s: (
                        running_task(s)
                        and task(s.alloc).get("Restarts") == 1
                        and types(s.alloc)[-1] == "Started"
                    ),
                    "service job, running again after one restart",
                )
            ],
        ),
        Case(
            "onfailure-exhausted",
            RAW,
            {"app": sh("exit 4")},
            [
                (
                    "onfailure-exhausted",
                    status_is("failed"),
                    "OnFailure: restart mode fail, 2 attempts used up → alloc failed",
                )
            ],
        ),
        Case(
            "init-sidecar",
            RAW,
            {"setup": sh("exit 0"), "proxy": SLEEP, "app": SLEEP},
            [("init-sidecar", init_sidecar_up, "init container done, sidecar and main running")],
        ),
        Case(
            "stopped",
            RAW,
            {"app": SLEEP},
            [
                (
                    "stopped",
                    stopped_done,
                    "pod deleted: job stopped (DELETE without purge), task got SIGTERM",
                )
            ],
            act=[(running_task, stop_job)],
        ),
        Case(
            "unschedulable",
            RAW,
            {"app": SLEEP},
            [
                (
                    "unschedulable",
                    blocked,
                    "no allocation: the evaluation could not place the job (CPU)",
                )
            ],
        ),
        Case(
            "failed-validation",
            RAW,
            {"app": sh("echo ${VAR:+yes}")},
            [
                (
                    "failed-validation",
                    status_is("failed"),
                    "a Config string with ${VAR:+yes} submitted unescaped (as vkgate did before translators/nomad/literal.py)",
                )
            ],
            interval="1m",
            unescaped=True,
        ),
        Case(
            "missing-binary",
            RAW,
            {"app": ["/nonexistent/bin"]},
            [
                (
                    "missing-binary",
                    status_is("failed"),
                    "the command does not exist; the task never starts",
                )
            ],
            interval="1m",
        ),
        Case(
            "restarted-twice",
            RAW,
            {"app": sh("exit 2")},
            [
                (
                    "restarted-twice",
                    status_is("failed"),
                    "exits 2 three times (2 restarts) and gives up",
                )
            ],
            interval="1m",
        ),
        Case(
            "docker-succeeded",
            DOCKER,
            {},
            [
                (
                    "docker-succeeded",
                    status_is("complete"),
                    "no command, the image's own command runs and exits 0",
                )
            ],
            interval="1m",
        ),
        Case(
            "docker-oom",
            DOCKER,
            {"app": sh("tail /dev/zero")},
            [
                (
                    "docker-oom",
                    status_is("failed"),
                    "a 20 MiB memory limit exceeded (tail /dev/zero)",
                )
            ],
            interval="1m",
        ),
    ]


# --------------------------------------------------------------------------- derived states


def renamed(doc: JSON, like: JSON) -> JSON:
    """``doc`` (a 1.6.3 capture) under the identity of the 1.11.3 file ``like``."""
    out = copy.deepcopy(doc)
    old_id, new_id = out["job"]["ID"], like["job"]["ID"]
    out["job"]["ID"] = new_id
    out["job"]["Name"] = like["job"]["Name"]
    out["job"]["Meta"] = copy.deepcopy(like["job"]["Meta"])
    if out["job"].get("JobSummary"):
        out["job"]["JobSummary"]["JobID"] = new_id
    for a in out["allocations"]:
        a["JobID"] = new_id
        a["Name"] = str(a["Name"]).replace(old_id, new_id)
    out["pod"] = copy.deepcopy(like["pod"])
    out.pop("capture", None)
    return out


def _index(evs: Sequence[Mapping[str, Any]], kind: str) -> int:
    return next(i for i, e in enumerate(evs) if e.get("Type") == kind)


def graft_task(alloc: JSON, like_alloc: Mapping[str, Any]) -> None:
    """Events after ``Task Setup`` and the task's state fields from the 1.11.3 derived file,
    re-timed onto this capture's ``Task Setup`` event."""
    ts, like = alloc["TaskStates"]["app"], like_alloc["TaskStates"]["app"]
    mine, theirs = ts["Events"], like["Events"]
    i, j = _index(mine, "Task Setup"), _index(theirs, "Task Setup")
    shift = int(mine[i]["Time"]) - int(theirs[j]["Time"])
    grafted = [dict(e, Time=int(e["Time"]) + shift) for e in copy.deepcopy(theirs[j + 1 :])]
    ts["Events"] = mine[: i + 1] + grafted
    for k in ("State", "Failed", "Restarts", "StartedAt", "FinishedAt", "LastRestart"):
        ts[k] = copy.deepcopy(like.get(k))
    for k in ("ClientStatus", "ClientDescription", "DesiredStatus"):
        alloc[k] = like_alloc[k]


def derive(name: str, new: Mapping[str, JSON]) -> JSON:
    like = old(name)
    how = like["note"]
    if name in ("lost", "unknown"):
        out = renamed(new["running"], like)
        a, la = out["allocations"][0], like["allocations"][0]
        for k in ("ClientStatus", "ClientDescription", "DesiredStatus"):
            a[k] = la[k]
        base = "running"
    elif name == "rescheduled":
        out = renamed(new["running"], like)
        current = out["allocations"][0]
        first = renamed(new["failed-exit-3"], like)["allocations"][0]
        first_id = like["allocations"][1]["ID"]
        first.update(
            ID=first_id,
            DesiredStatus="stop",
            NextAllocation=current["ID"],
            CreateIndex=int(current["CreateIndex"]) - 5,
            ModifyIndex=int(current["CreateIndex"]) - 1,
        )
        current["PreviousAllocation"] = first_id
        out["allocations"] = [current, first]
        base = "running and failed-exit-3"
    elif name == "oom-killed":
        out = renamed(new["failed-exit-3"], like)
        evs = out["allocations"][0]["TaskStates"]["app"]["Events"]
        lev = like["allocations"][0]["TaskStates"]["app"]["Events"]
        t, lt = evs[_index(evs, "Terminated")], lev[_index(lev, "Terminated")]
        for k in ("Details", "DisplayMessage", "Message"):
            t[k] = copy.deepcopy(lt[k])
        base = "failed-exit-3"
    elif name in ("setup-failure", "image-pull", "image-pull-backoff"):
        out = renamed(new["running"], like)
        graft_task(out["allocations"][0], like["allocations"][0])
        base = "running"
    elif name == "not-placed":
        out = renamed(new["unschedulable"], like)
        out["evaluations"] = []
        base = "unschedulable"
    else:
        raise KeyError(name)
    out["note"] = (
        f"derived from the nomad agent -dev {VERSION} capture of {base} ({TODAY}) the way the "
        f"1.11.3 file was derived: {how}"
    )
    return out


DERIVED = (
    "lost",
    "unknown",
    "rescheduled",
    "oom-killed",
    "setup-failure",
    "not-placed",
    "image-pull",
    "image-pull-backoff",
)


# --------------------------------------------------------------------------- running the cases


def settings_for(case: Case) -> JSON:
    return {
        "template": case.template,
        "restart_delay": "2s",
        "restart_attempts": 2,
        "restart_interval": case.interval,
    }


def submit(api: Api, case: Case, factor: float) -> None:
    case.settings = settings_for(case)
    pod = pod_with(case.source_pod(), case.commands)
    job = rendered(pod, node=case.node(), settings=case.settings, factor=factor)
    if case.unescaped:
        for t in job["Job"]["TaskGroups"][0]["Tasks"]:
            t["Config"] = unescape(t["Config"])
    case.job_id = job["Job"]["ID"]
    api.register(job)


def snapshot(api: Api, case: Case, *, with_evals: bool) -> Snap:
    """The allocations (and evaluations); the job stub is read when a shot is taken (one
    request less per poll: some states last only Nomad's 2 s restart delay)."""
    allocs = api.allocs(case.job_id)
    evals = api.get(f"/job/{case.job_id}/evaluations") if with_evals else []
    return Snap(job={}, allocs=allocs, evals=evals)


def write_state(
    api: Api, case: Case, snap: Snap, out: str, what: str, node_ips: Mapping[str, str]
) -> JSON:
    like_name = out if (OLD / f"{out}.nomad.json").exists() else case.name
    like = old(like_name)
    full = bool(like["allocations"]) and "Metrics" in like["allocations"][0]
    allocs = snap.allocs
    if full:
        allocs = []
        for a in snap.allocs:
            detail = api.get(f"/allocation/{a['ID']}")
            detail.pop("Job", None)
            allocs.append(detail)
    doc: JSON = {
        "allocations": allocs,
        "job": snap.job or api.stub(case.job_id),
        "node_ips": {
            nid: node_ips[nid] for nid in {str(a.get("NodeID")) for a in allocs} if nid in node_ips
        },
        "note": f"captured from nomad agent -dev {VERSION} on {TODAY} ({case.driver}): {what}",
        "pod": case.source_pod(),
        "capture": {
            "template": case.template,
            "settings": case.settings,
            "commands": {k: list(v) for k, v in case.commands.items()},
            **({"submitted": "driver Config unescaped"} if case.unescaped else {}),
        },
    }
    if "evaluations" in like:
        doc["evaluations"] = snap.evals
    dump(NEW / f"{out}.nomad.json", doc)
    return doc


def run_cases(
    api: Api,
    cases: list[Case],
    factor: float,
    node_ips: Mapping[str, str],
    on_poll: Callable[[Case, Snap], None] | None = None,
    *,
    write: bool = True,
) -> dict[str, JSON]:
    """Submit the cases, poll until every shot was taken; writes the state files (``write``)."""
    docs: dict[str, JSON] = {}
    for case in cases:
        submit(api, case, factor)
    started = time.monotonic()
    active = list(cases)
    while active:
        for case in list(active):
            snap = snapshot(api, case, with_evals=case.name == "unschedulable")
            if on_poll is not None:
                on_poll(case, snap)
            if case.done_acts < len(case.act) and case.act[case.done_acts][0](snap):
                case.act[case.done_acts][1](api, case.job_id)
                case.done_acts += 1
                continue
            for out, cond, what in case.shots:
                if out not in case.written and case.done_acts == len(case.act) and cond(snap):
                    docs[out] = write_state(api, case, snap, out, what, node_ips) if write else {}
                    case.written.add(out)
                    print(f"  {out}: {time.monotonic() - started:.1f}s", flush=True)
            if len(case.written) == len(case.shots):
                active.remove(case)
            elif time.monotonic() - started > case.timeout:
                raise TimeoutError(
                    f"{case.name}: {json.dumps(snap.alloc)[:3000]} evals={snap.evals}"
                )
        time.sleep(0.2)
    return docs


# --------------------------------------------------------------------------- event stream


class StreamRecorder(threading.Thread):
    """Raw ``/v1/event/stream`` bytes for one job (``Topic:<job id>`` filters) until ``finish``
    is set and a heartbeat has arrived after it (or ``limit`` seconds passed)."""

    def __init__(self, address: str, job_id: str, *, index: int = 0, limit: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.address, self.job_id, self.index, self.limit = address, job_id, index, limit
        self.data = bytearray()
        self.finish = threading.Event()
        self.error: BaseException | None = None

    def params(self) -> httpx.QueryParams:
        p: list[tuple[str, str]] = [
            ("topic", f"{t}:{self.job_id}") for t in ("Job", "Allocation", "Evaluation")
        ]
        p.append(("namespace", "default"))
        if self.index:
            p.append(("index", str(self.index)))
        return httpx.QueryParams(tuple(p))

    def run(self) -> None:
        deadline = time.monotonic() + self.limit
        try:
            with (
                httpx.Client(
                    base_url=self.address, timeout=httpx.Timeout(10, read=15), trust_env=False
                ) as c,
                c.stream("GET", "/v1/event/stream", params=self.params()) as r,
            ):
                mark = -1
                for chunk in r.iter_bytes():
                    self.data += chunk
                    if self.finish.is_set() and mark < 0:
                        mark = len(self.data) - len(chunk)
                    if mark >= 0 and b"{}\n" in self.data[mark:]:
                        return
                    if time.monotonic() > deadline:
                        return
        except httpx.ReadTimeout:
            return
        except BaseException as exc:  # reported by the caller
            self.error = exc


def record_events(
    api: Api, cases: Sequence[Case], factor: float, node_ips: Mapping[str, str]
) -> dict[str, JSON]:
    """Run state cases while recording each one's event stream (until a heartbeat after the
    case ended), then reconnect at each stream's second index and record for ~10 s (until the
    next heartbeat) to see what a resume replays."""
    recorders: dict[str, StreamRecorder] = {}
    for case in cases:
        pod = pod_with(case.source_pod(), case.commands)
        job = rendered(pod, node=case.node(), settings=settings_for(case), factor=factor)
        recorders[case.name] = StreamRecorder(api.address, str(job["Job"]["ID"]))
        recorders[case.name].start()
    time.sleep(0.5)
    docs = run_cases(api, list(cases), factor, node_ips)
    resumed: dict[str, StreamRecorder] = {}
    for name, rec in recorders.items():
        rec.finish.set()
        rec.join(30)
        if rec.error:
            raise rec.error
        (API / f"events-{name}.ndjson").write_bytes(bytes(rec.data))
        lines = [ln for ln in bytes(rec.data).splitlines() if ln.strip() not in (b"", b"{}")]
        if len(lines) >= 2:
            index = int(json.loads(lines[1])["Index"])
            resumed[name] = StreamRecorder(api.address, rec.job_id, index=index, limit=8)
            resumed[name].start()
    for name, rec in resumed.items():
        rec.join(30)
        (API / f"events-{name}-resume.ndjson").write_bytes(bytes(rec.data))
    return docs


# --------------------------------------------------------------------------- API pods


def api_pod(
    name: str, *, containers: Sequence[JSON], init: Sequence[JSON] = (), policy: str = "Always"
) -> JSON:
    spec: JSON = {
        "restartPolicy": policy,
        "terminationGracePeriodSeconds": 1,
        "containers": list(containers),
    }
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"{name}-1630-4000-8000-000000000001",
        },
        "spec": spec,
    }


LOGS_SCRIPT = (
    'n=$(ls "$NOMAD_ALLOC_DIR" | grep -c "^run\\.") ; touch "$NOMAD_ALLOC_DIR/run.$n"; '
    'echo "run $n stdout"; echo "run $n stderr" >&2; '
    'if [ "$n" = 0 ]; then exit 1; fi; exec sleep 3600'
)
BURN = sh("while :; do :; done")


def exec_frames(
    address: str,
    alloc_id: str,
    task_name: str,
    command: Sequence[str],
    stdin: bytes = b"",
    *,
    close_stdin: bool = True,
    timeout: float = 20.0,
) -> JSON:
    """One exec session as vkgate opens it: the handshake, stdin (closed unless told not to, as
    vkgate does for ``kubectl exec`` without ``-i``), then every server frame until the
    connection ends; ``close`` is the close frame (None: dropped without one)."""
    q = urllib.parse.urlencode(
        {
            "task": task_name,
            "command": json.dumps(list(command)),
            "tty": "false",
            "ws_handshake": "true",
        }
    )
    url = "ws://" + address.removeprefix("http://") + f"/v1/client/allocation/{alloc_id}/exec?{q}"
    frames: list[Any] = []
    close: JSON | None = None
    with connect(url, open_timeout=10, max_size=2**24) as ws:
        try:
            ws.send(json.dumps({"version": 1, "auth_token": ""}))
            if stdin:
                ws.send(json.dumps({"stdin": {"data": base64.b64encode(stdin).decode()}}))
            if close_stdin:
                ws.send(json.dumps({"stdin": {"close": True}}))
            while True:
                frames.append(json.loads(ws.recv(timeout=timeout)))
        except ConnectionClosed as exc:
            if exc.rcvd is not None:
                close = {"code": int(exc.rcvd.code), "reason": exc.rcvd.reason}
        except TimeoutError:
            close = {"no_end_after_seconds": timeout}
    return {
        "command": list(command),
        "task": task_name,
        "stdin": stdin.decode(),
        "stdin_closed": close_stdin,
        "frames": frames,
        "close": close,
    }


@dataclass
class LogsProbe:
    between: list[JSON] | None = None


def trim_alloc(a: Mapping[str, Any]) -> JSON:
    keep = (
        "ID",
        "Name",
        "Namespace",
        "JobID",
        "NodeID",
        "NodeName",
        "ClientStatus",
        "DesiredStatus",
        "CreateIndex",
        "ModifyIndex",
        "CreateTime",
        "ModifyTime",
    )
    out: JSON = {k: a.get(k) for k in keep}
    out["TaskStates"] = {
        n: {k: ts.get(k) for k in ("State", "Failed", "Restarts", "StartedAt", "FinishedAt")}
        for n, ts in (a.get("TaskStates") or {}).items()
    }
    return out


def trim_job(j: Mapping[str, Any]) -> JSON:
    return {
        k: j.get(k)
        for k in ("ID", "Name", "Namespace", "Type", "Status", "Stop", "ModifyIndex", "Meta")
    }


def started_at(alloc: Mapping[str, Any]) -> float:
    """Unix time the allocation's first task started (the clock the samples are timed by)."""
    times = [
        _dt.datetime.fromisoformat(str(ts["StartedAt"])[:26].rstrip("Z") + "+00:00").timestamp()
        for ts in (alloc.get("TaskStates") or {}).values()
        if ts.get("StartedAt")
    ]
    return min(times)


class StatsSampler(threading.Thread):
    """Stats replies of one case's allocation ``offsets`` seconds after its task started, with
    the per-pid maps (``Pids``) kept: they show whose processes Nomad counts."""

    def __init__(self, api: Api, case: Case, offsets: Sequence[float], note: str, path: Path):
        super().__init__(daemon=True)
        self.api, self.case, self.offsets, self.note, self.path = api, case, offsets, note, path
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.sample()
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def sample(self) -> None:
        api, case = self.api, self.case
        first = started_at(api.allocs(case.job_id)[0])
        samples: list[JSON] = []
        for off in self.offsets:
            time.sleep(max(0.0, first + off - time.time()))
            a = api.allocs(case.job_id)[0]
            stats = api.get(f"/client/allocation/{a['ID']}/stats")
            wall = _dt.datetime.now(_dt.UTC).isoformat().replace("+00:00", "Z")
            samples.append(
                {"wall": wall, "allocations": [trim_alloc(a)], "stats": {a["ID"]: stats}}
            )
        versions = {str(n["ID"]): str(n["Version"]) for n in api.get("/nodes")}
        dump(
            self.path,
            {
                "note": self.note,
                "jobs": [trim_job(api.stub(case.job_id))],
                "node_versions": versions,
                "samples": samples,
            },
        )


# --------------------------------------------------------------------------- main


@contextlib.contextmanager
def timed(what: str, log: dict[str, float]) -> Iterator[None]:
    t = time.monotonic()
    print(f"{what} ...", flush=True)
    try:
        yield
    finally:
        log[what] = round(time.monotonic() - t, 1)
        print(f"{what}: {log[what]} s", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated phases: states,events,api,literal")
    p.add_argument("--no-docker", action="store_true")
    args = p.parse_args(argv)
    phases = set(filter(None, args.only.split(","))) or {"states", "events", "api", "literal"}
    log: dict[str, float] = {}
    t0 = time.monotonic()
    dockerd: Dockerd | None = None
    agent: NomadAgent | None = None
    try:
        with timed("agent", log):
            if not args.no_docker:
                try:
                    dockerd = launch_dockerd()
                    make_busybox_image(dockerd)
                except BinaryUnavailable as exc:
                    print(f"no docker: {exc}", file=sys.stderr)
                    dockerd = None
            agent = launch_nomad(docker_host=dockerd.host if dockerd else None)
        api = Api(agent.address)
        version = api.get("/agent/self")["config"]["Version"]["Version"]
        if version != VERSION:
            raise SystemExit(f"the agent is {version}, not {VERSION}")
        nodes = api.get("/nodes", resources="true")
        node_ips = {str(n["ID"]): NODE_IP for n in nodes}
        factor = mhz_per_core(nodes, NomadConfig.from_settings({}, environ={}))
        cases = [c for c in state_cases() if dockerd or c.template != DOCKER]
        if "events" in phases:
            with timed("events", log):
                API.mkdir(parents=True, exist_ok=True)
                streamed = [c for c in cases if c.name in ("succeeded", "unschedulable")]
                record_events(api, streamed, factor, node_ips)
                cases = [c for c in cases if c not in streamed]
        new: dict[str, JSON] = {}
        if "states" in phases:
            with timed("states", log):
                new = run_cases(api, cases, factor, node_ips)
                for name in ("succeeded", "unschedulable"):
                    path = NEW / f"{name}.nomad.json"
                    if path.exists():
                        new[name] = json.loads(path.read_text())
                for name in DERIVED:
                    if name.startswith("image-pull") and "running" not in new:
                        continue
                    dump(NEW / f"{name}.nomad.json", derive(name, new))
        if "api" in phases:
            with timed("api", log):
                capture_api(api, agent, factor, node_ips, docker=dockerd is not None)
        if "literal" in phases:
            with timed("literal", log):
                capture_literal(api, factor)
    finally:
        if agent is not None:
            agent.stop()
        if dockerd is not None:
            dockerd.stop()
    log["total"] = round(time.monotonic() - t0, 1)
    print(json.dumps(log))
    return 0


def capture_api(
    api: Api, agent: NomadAgent, factor: float, node_ips: Mapping[str, str], *, docker: bool
) -> None:
    logs_case = Case(
        "api-logs",
        RAW,
        {"app": sh(LOGS_SCRIPT)},
        [
            (
                "api-logs",
                lambda s: (
                    running_task(s)
                    and task(s.alloc).get("Restarts") == 1
                    and types(s.alloc)[-1] == "Started"
                ),
                "",
            )
        ],
        pod=api_pod("logs", containers=[{"name": "app", "image": "busybox:1.36"}]),
    )
    burn_case = Case(
        "api-burn",
        RAW,
        {"setup": sh("exit 0"), "app": BURN, "idle": SLEEP},
        [("api-burn", running_task, "")],
        pod=api_pod(
            "burner",
            init=[{"name": "setup", "image": "busybox:1.36"}],
            containers=[
                {"name": "app", "image": "busybox:1.36"},
                {"name": "idle", "image": "busybox:1.36"},
            ],
        ),
    )
    docker_case = Case(
        "api-docker",
        DOCKER,
        {"app": BURN, "log": SLEEP},
        [
            (
                "api-docker",
                lambda s: running_task(s) and task(s.alloc, "log").get("State") == "running",
                "",
            )
        ],
        pod=api_pod(
            "dockerburn",
            containers=[
                {
                    "name": "app",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"memory": "64Mi"}},
                },
                {"name": "log", "image": "busybox:1.36"},
            ],
        ),
    )
    never_case = Case(
        "api-never",
        RAW,
        {"app": ["/nonexistent/bin"]},
        [("api-never", status_is("failed"), "")],
        pod=api_pod("never", containers=[{"name": "app", "image": "x"}], policy="Never"),
    )
    cases = [logs_case, burn_case, never_case] + ([docker_case] if docker else [])
    probe = LogsProbe()

    def between_runs(case: Case, snap: Snap) -> None:
        if case is not logs_case or probe.between is not None or not snap.allocs:
            return
        ts = task(snap.alloc)
        if "Terminated" in types(snap.alloc) and ts.get("State") != "running":
            probe.between = api.get(f"/client/fs/ls/{snap.alloc['ID']}", path="alloc/logs")

    run_cases(api, cases, factor, node_ips, on_poll=between_runs, write=False)
    # stats: sampled from the tasks' start while the logs and exec captures go on
    samplers = [
        StatsSampler(
            api,
            burn_case,
            (4, 13, 18),
            f"captured from nomad agent -dev {VERSION} on {TODAY} (raw_exec, root, cgroup v1): "
            "a pod with an init container (setup, dead), a busy loop (app) and sleep (idle), "
            "sampled about 4 s, 13 s and 18 s after it started; allocation stubs trimmed to "
            "the fields the mapping reads; per-pid maps (Pids) kept: each task's set holds "
            "Nomad's executor process as well as the task's own",
            METRICS / "raw-exec-burn.nomad.json",
        )
    ]
    if docker:
        samplers.append(
            StatsSampler(
                api,
                docker_case,
                (4, 13, 18),
                f"captured from nomad agent -dev {VERSION} on {TODAY} (docker driver, cgroup "
                "v1): a busy loop (app) and sleep (log), sampled about 4 s, 13 s and 18 s after "
                "they started; allocation stubs trimmed to the fields the mapping reads",
                METRICS / "docker-cgroup.nomad.json",
            )
        )
    for sampler in samplers:
        sampler.start()
    # logs of the restarted task: both runs appended to the same files
    alloc = api.allocs(logs_case.job_id)[0]
    aid = alloc["ID"]
    time.sleep(1.0)

    def logs(**params: Any) -> JSON:
        code, body = api.raw(f"/client/fs/logs/{aid}", **params)
        return {"params": params, "status": code, "body": body}

    def logs_of(alloc_id: str) -> JSON:
        code, body = api.raw(
            f"/client/fs/logs/{alloc_id}", task="app", type="stdout", origin="start", offset=0
        )
        return {"alloc": alloc_id, "status": code, "body": body}

    never = api.allocs(never_case.job_id)[0]["ID"]
    doc: JSON = {
        "note": f"captured from nomad agent -dev {VERSION} on {TODAY} (raw_exec): a service task that "
        "prints one stdout and one stderr line per run, exits 1 on its first run and sleeps "
        "on the second; ls_between_runs was read while Nomad waited to restart it",
        "job": api.stub(logs_case.job_id),
        "allocation": alloc,
        "ls_between_runs": probe.between,
        "ls": api.get(f"/client/fs/ls/{aid}", path="alloc/logs"),
        "stdout": logs(task="app", type="stdout", follow="false", origin="start", offset=0),
        "stderr": logs(task="app", type="stderr", follow="false", origin="start", offset=0),
        "stdout_end": logs(task="app", type="stdout", follow="false", origin="end", offset=12),
        "stdout_plain": logs(
            task="app", type="stdout", follow="false", origin="start", offset=0, plain="true"
        ),
        "unknown_task": logs(task="nope", type="stdout", follow="false", origin="start", offset=0),
        "never_started": logs_of(never),
    }
    dump(API / "logs.json", doc)
    # exec: a command that cannot start, one that exits 3 with output on both streams, stdin
    execs = [
        exec_frames(api.address, aid, "app", ["/no/such/binary"]),
        exec_frames(api.address, aid, "app", sh("echo out; echo err >&2; exit 3")),
        exec_frames(api.address, aid, "app", ["/bin/cat"], stdin=b"from stdin\n"),
        exec_frames(api.address, aid, "app", sh("echo out; exit 3"), close_stdin=False, timeout=5),
    ]
    if docker:
        dalloc = api.allocs(docker_case.job_id)[0]["ID"]
        execs += [
            exec_frames(api.address, dalloc, "log", ["/no/such/binary"]),
            exec_frames(api.address, dalloc, "log", sh("echo out; echo err >&2; exit 3")),
        ]
    dump(
        API / "exec.json",
        {
            "note": f"captured from nomad agent -dev {VERSION} on {TODAY}: server frames of "
            "/v1/client/allocation/:id/exec (ws_handshake=true) and the close frame "
            "(null: the connection was dropped without one); raw_exec first, then docker",
            "sessions": execs,
        },
    )
    # stats
    for sampler in samplers:
        sampler.join(60)
        if sampler.error:
            raise sampler.error
    # nodes, vkgate's job list query, the capacity query
    node_id = str(api.get("/nodes")[0]["ID"])
    owner = 'Meta["vkgate.io/owner"] == "vkgate" and Meta["vkgate.node"] == "vk-capture"'
    held = HELD_FILTER + f' and (NodeID == "{node_id}")'
    dump(
        API / "nodes.json",
        {
            "note": f"captured from nomad agent -dev {VERSION} on {TODAY} (one client, nothing reserved) "
            "while the states' and the API captures' jobs ran",
            "nodes": api.get("/nodes", resources="true"),
            "node": api.get(f"/node/{node_id}"),
            "jobs_query": {"meta": "true", "filter": owner},
            "jobs": api.get("/jobs", meta="true", filter=owner),
            "held_query": {
                "namespace": "*",
                "resources": "true",
                "task_states": "false",
                "filter": held,
            },
            "held": api.get(
                "/allocations", namespace="*", resources="true", task_states="false", filter=held
            ),
        },
    )


LITERAL_CONFIG = {
    "colon": "${VAR:+yes}",
    "directive": "%{ if x }",
    "unknown": "${FOO}",
}


def capture_literal(api: Api, factor: float) -> None:
    """Nomad's own words for unescaped Config strings, and what raw_exec Env interpolates."""
    results: JSON = {}
    for key, text in LITERAL_CONFIG.items():
        case = Case(
            f"lit-{key}",
            RAW,
            {"app": sh(f"echo {text}")},
            [(f"lit-{key}", status_is("failed", "complete"), "")],
            interval="1m",
            unescaped=True,
            pod=api_pod(f"lit-{key}", containers=[{"name": "app", "image": "x"}], policy="Never"),
        )
        results[key] = run_literal(api, case, factor)
    env_case = Case(
        "lit-env",
        RAW,
        {"app": sh('echo "$A|$B|$C"')},
        [("lit-env", status_is("failed", "complete"), "")],
        interval="1m",
        pod=api_pod("lit-env", containers=[{"name": "app", "image": "x"}], policy="Never"),
    )
    results["env"] = run_literal(
        api, env_case, factor, env={"A": "${HOME}", "B": "${VAR:+yes}", "C": "${NOMAD_TASK_NAME}"}
    )
    dump(
        API / "literal.json",
        {
            "note": f"captured from nomad agent -dev {VERSION} on {TODAY} (raw_exec, root): driver Config "
            "strings submitted unescaped, and task Env values submitted as they are",
            "results": results,
        },
    )


def run_literal(api: Api, case: Case, factor: float, env: Mapping[str, str] | None = None) -> JSON:
    case.settings = settings_for(case)
    pod = pod_with(case.source_pod(), case.commands)
    job = rendered(pod, node="vk-capture", settings=case.settings, factor=factor)
    t = job["Job"]["TaskGroups"][0]["Tasks"][0]
    if case.unescaped:
        t["Config"] = unescape(t["Config"])
    if env:
        t["Env"] = dict(t.get("Env") or {}, **env)
    case.job_id = job["Job"]["ID"]
    api.register(job)
    deadline = time.monotonic() + 60
    while True:
        allocs = api.allocs(case.job_id)
        if allocs and allocs[0]["ClientStatus"] in ("failed", "complete"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(case.name)
        time.sleep(0.2)
    a = allocs[0]
    code, out = api.raw(
        f"/client/fs/logs/{a['ID']}",
        task="app",
        type="stdout",
        plain="true",
        origin="start",
        offset=0,
    )
    evs = [
        e
        for e in events(a)
        if e.get("Type") in ("Failed Validation", "Driver Failure", "Terminated")
    ]
    return {
        "submitted": t["Config"],
        "env": env,
        "client_status": a["ClientStatus"],
        "events": [
            {"Type": e["Type"], "DisplayMessage": e["DisplayMessage"], "Details": e["Details"]}
            for e in evs
        ],
        "stdout": out if code == 200 else "",
    }


if __name__ == "__main__":
    sys.exit(main())
