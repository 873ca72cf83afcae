"""Child processes that cannot outlive the harness: process groups, death signal, atexit.

Every server the devstack starts (etcd, kube-apiserver, Nomad, a gateway) runs in its own
session (``start_new_session``) so that stopping it signals the whole group, including anything
it forked (Nomad's raw_exec tasks, executor helpers).  Three layers make leaks unlikely:

1. ``Proc.stop()`` — SIGTERM to the group, wait, SIGKILL to the group; called by the owners'
   context managers in ``finally`` blocks;
2. an ``atexit`` hook that stops whatever is still registered when the interpreter exits;
3. ``PR_SET_PDEATHSIG`` (Linux): the kernel sends SIGKILL to the child if the thread that
   started it dies — covers ``kill -9`` of the test runner.  Start processes from a
   long-lived thread (the main thread) for that reason.

Also the small helpers every starter needs: free loopback ports and a polling ``wait_for``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

from gateway.errors import GatewayError

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_live: set[Proc] = set()
_live_lock = threading.Lock()


class DevstackError(GatewayError):
    """A devstack component failed to start or stop; the message says which and why."""


class BinaryUnavailable(DevstackError):
    """A required binary is missing and cannot be built here (no Go, build failed)."""


def kill_processes_under(path: Path) -> list[str]:
    """SIGKILL every process (but this one) whose working directory is ``path`` or below it, or
    whose command line names it, and return what was killed (``"pid: command"``).

    For what a stopped agent leaves: a Nomad client that is killed (or stopped while a task
    ignores it) leaves its executors — each in a session of its own, so no group signal
    reaches them — and their tasks running in its alloc dir.  After the agent is stopped
    nothing of it may run there (docs/design/control-plane.md, "Nothing survives a run")."""
    root = str(path).rstrip("/")
    killed: list[str] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            cmd = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue  # gone, or a kernel thread
        if cwd == root or cwd.startswith(root + "/") or root + "/" in cmd or cmd.endswith(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(f"{pid}: {cmd.strip()[:200]}")
    return killed


def free_ports(count: int, host: str = "127.0.0.1") -> tuple[int, ...]:
    """``count`` distinct TCP ports that were free a moment ago: every socket stays bound until
    all are chosen (``free_port`` three times in a row can return one port twice — a Nomad
    agent then polls its own serf port over HTTP and exits)."""
    with contextlib.ExitStack() as stack:
        socks = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for s in socks:
            s.bind((host, 0))
        return tuple(int(s.getsockname()[1]) for s in socks)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


try:  # resolved in the parent so the child (between fork and exec) only makes one call
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None


def _pdeathsig() -> None:  # runs in the child between fork and exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Proc:
    """One child process in its own process group, output captured to a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_file: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = True,
        user: int | None = None,
        group: int | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_file = log_file
        self._spawn = {
            "env": env,
            "cwd": cwd,
            "die_with_parent": die_with_parent,
            "user": user,
            "group": group,
        }
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_file, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                user=user,
                group=group,
                extra_groups=[] if user is not None else None,
                # One libc call, no Python-level locks taken: safe enough with threads.
                preexec_fn=_pdeathsig if die_with_parent and _prctl is not None else None,  # noqa: PLW1509
            )
        except OSError as exc:
            self._log.close()
            raise DevstackError(f"{name}: cannot start {self.argv[0]}: {exc}") from exc
        self.pid = self.popen.pid
        with _live_lock:
            _live.add(self)

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, then SIGKILL after ``timeout``; idempotent."""
        if self.alive():
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.popen.wait(10)
        # Stragglers go too: the group, and anything still in the child's session (Nomad puts
        # raw_exec tasks in their own process groups, but they stay in its session).
        self._signal_group(signal.SIGKILL)
        deadline = time.monotonic() + 5
        while (members := session_members(self.pid)) and time.monotonic() < deadline:
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)  # SIGKILL is delivered asynchronously; wait until they are gone
        self._log.close()
        with _live_lock:
            _live.discard(self)
        return self.popen.returncode

    def respawn(self) -> Proc:
        """A new process with the same command, environment and log file (after ``kill`` or
        ``stop``: restart-after-crash tests)."""
        return Proc(self.name, self.argv, log_file=self.log_file, **self._spawn)  # type: ignore[arg-type]

    def kill(self) -> None:
        """SIGKILL the whole group at once (crash simulation)."""
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)

    def rss_bytes(self) -> int | None:
        """Resident set size of the main process (Linux), None when unknown."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None


def session_members(sid: int) -> list[int]:
    """Pids of live processes in session ``sid`` (Linux /proc; empty elsewhere)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Fields after the ")" of the command name: state ppid pgrp session ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            members.append(int(entry))
    return members


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    proc: Proc | None = None,
) -> T:
    """Call ``probe`` until it returns something other than None/False.

    Raises ``DevstackError`` naming ``what`` on timeout, or at once if ``proc`` exits, with
    the tail of its log so the cause is in the test output.
    """
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            result = probe()
        except Exception as exc:  # probes may raise while the server starts
            result = None
            last_error = f"{type(exc).__name__}: {exc}"
        if result is not None and result is not False:
            return result
        if proc is not None and not proc.alive():
            raise DevstackError(
                f"{proc.name} exited with code {proc.returncode} while waiting for {what}; "
                f"log {proc.log_file}:\n{proc.log_tail()}"
            )
        if time.monotonic() >= deadline:
            tail = f"\nlog {proc.log_file}:\n{proc.log_tail()}" if proc is not None else ""
            hint = f" (last error: {last_error})" if last_error else ""
            raise DevstackError(f"timed out after {timeout:.0f}s waiting for {what}{hint}{tail}")
        time.sleep(interval)


def stop_all() -> None:
    """Stop every process still registered (atexit; also handy in signal handlers)."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        with contextlib.suppress(Exception):
            p.stop(timeout=5)


atexit.register(stop_all)
