"""Devstack children never outlive their owner: groups, sessions, failures during startup."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from devstack.process import DevstackError, Proc, free_port, session_members, wait_for


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _wait_file(path: Path) -> str:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return path.read_text()


def test_stop_kills_children_in_other_process_groups(tmp_path: Path) -> None:
    """Like Nomad's raw_exec tasks: a grandchild in its own group but the same session."""
    pidfile = tmp_path / "pid"
    script = f"(set -m; sleep 300 & echo $! > {pidfile}; wait) & wait"
    proc = Proc("tree", ["/bin/bash", "-c", script], log_file=tmp_path / "log")
    grandchild = int(_wait_file(pidfile))
    assert os.getpgid(grandchild) != proc.pid  # `set -m` gave it its own group
    assert grandchild in session_members(proc.pid)
    proc.stop(timeout=5)
    assert _gone(proc.pid)
    assert _gone(grandchild)


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    proc = Proc(
        "stubborn", ["/bin/sh", "-c", "trap '' TERM; echo up; sleep 300"], log_file=tmp_path / "l"
    )
    _wait_file(tmp_path / "l")
    started = time.monotonic()
    assert proc.stop(timeout=0.5) == -9
    assert time.monotonic() - started < 5
    assert _gone(proc.pid)


def test_wait_for_reports_early_exit_with_log(tmp_path: Path) -> None:
    proc = Proc("broken", ["/bin/sh", "-c", "echo bad flag >&2; exit 3"], log_file=tmp_path / "l")
    with pytest.raises(DevstackError, match=r"(?s)broken exited with code 3.*bad flag"):
        wait_for("readiness", lambda: None, timeout=30, proc=proc)
    proc.stop()


def test_wait_for_times_out_naming_what(tmp_path: Path) -> None:
    with pytest.raises(DevstackError, match="waiting for the moon"):
        wait_for("the moon", lambda: False, timeout=0.1, interval=0.02)


def test_wait_for_returns_probe_value() -> None:
    calls = iter([None, ValueError("not yet"), {"ok": 1}])

    def probe() -> object:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_for("x", probe, timeout=5, interval=0.01) == {"ok": 1}


def test_free_port_is_bindable_on_loopback() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_missing_executable_is_a_devstack_error(tmp_path: Path) -> None:
    with pytest.raises(DevstackError, match="cannot start"):
        Proc("nope", [str(tmp_path / "no-such-binary")], log_file=tmp_path / "l")


def test_kill_processes_under_kills_what_runs_in_or_names_a_dir_and_nothing_else(
    tmp_path: Path,
) -> None:
    """What a stopped Nomad agent leaves — an executor naming its alloc dir, a task whose
    working directory is in it, each in a session of its own — is killed; a process elsewhere
    is not."""
    import subprocess
    import sys

    from devstack.process import kill_processes_under

    inside = tmp_path / "alloc" / "task"
    inside.mkdir(parents=True)
    elsewhere = tmp_path.parent
    task = subprocess.Popen(["sleep", "61"], cwd=inside, start_new_session=True)
    executor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(62)", str(tmp_path / "alloc" / "log")],
        cwd=elsewhere,
        start_new_session=True,
    )
    bystander = subprocess.Popen(["sleep", "63"], cwd=elsewhere, start_new_session=True)
    try:
        wait_for(
            "the three processes exec'd",
            lambda: all(
                b"sleep" in Path(f"/proc/{p.pid}/cmdline").read_bytes()
                for p in (task, executor, bystander)
            ),
            timeout=10,
            interval=0.02,
        )
        killed = kill_processes_under(tmp_path)
        assert task.wait(timeout=10) == -9
        assert executor.wait(timeout=10) == -9
        assert bystander.poll() is None
        assert sorted(int(k.split(":")[0]) for k in killed) == sorted([task.pid, executor.pid])
    finally:
        for p in (task, executor, bystander):
            p.kill()
            p.wait()


def test_free_ports_are_distinct() -> None:
    """An agent's ports are picked together: three ``free_port`` calls in a row can return one
    port twice (a dev Nomad then bound serf where its HTTP API should be, and exited)."""
    from devstack.process import free_ports

    ports = free_ports(64)
    assert len(ports) == 64 and len(set(ports)) == 64
    assert all(0 < p < 65536 for p in ports)
