"""Run a command inside a fresh network namespace that has only ``lo``, as the init of a PID
namespace of its own: nothing it starts outlives it.

Why: the e2e tier's network rule is "loopback only".  Inside a namespace with no other
interface and no route, a stray connection (cloud metadata, an update check, a mistyped
address) fails at once with ENETUNREACH instead of leaving the machine — the rule is enforced,
not just hoped for.  And "nothing survives a run": a Nomad executor whose agent was killed, a
task that called ``setsid``, a daemon that double-forked all stay in the PID namespace, and the
kernel kills every process of a PID namespace when its init dies — however the run ends,
``kill -9`` included (docs/design/control-plane.md, "Nothing survives a run").

    python -m devstack.netns [--require] -- pytest -m e2e tests/e2e

How: re-run this module under ``unshare --net --pid --fork --kill-child --mount-proc`` (root
only: as non-root we would need a user namespace, where Nomad believes it is root and fails to
create its cgroup).  The re-run module is PID 1 of the new namespace: it brings ``lo`` up with
one ioctl, starts the command, reaps every orphan while it runs, and when the command exits,
lists what is still alive: after a short grace it names each leftover process on stderr and
exits non-zero (then the kernel kills them).  ``unshare`` dies with its parent
(``PR_SET_PDEATHSIG``), and ``--kill-child`` takes the init with it.  Where the namespaces
cannot be created the command runs unisolated after one line on stderr, or fails with
``--require``.

``enter_private_network()`` gives the calling thread a further network namespace of its own:
each parallel e2e worker (pytest-xdist) calls it first, so that its clusters, addresses and
ports cannot meet another worker's.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

_MARK = "VKGATE_NETNS"
#: The network namespace the command was started from (recorded before ``unshare``).
_HOST_NS = "VKGATE_NETNS_OUTSIDE"
#: Set by the launcher for the one re-run under ``unshare``; the init takes it out of the
#: environment, so a nested ``python -m devstack.netns`` makes namespaces of its own again.
_INIT = "VKGATE_NETNS_INIT"
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
#: How long the init waits for processes still exiting after the command before it names
#: them as leftovers (a gateway's last Event flush, a dockerd shim finishing its exit).
LEFTOVER_GRACE = 10.0
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


#: Documentation addresses (TEST-NET-2, RFC 5737) for a routable node inside the namespace.
#: Never 192.0.2.0/24: on these machines that is the real uplink.
ROUTABLE_NODE_IPS = ("198.51.100.10", "198.51.100.11", "198.51.100.12")


def isolated() -> bool:
    """True only inside the namespace this module created (never the host's own)."""
    if os.environ.get(_MARK) != "1":
        return False
    outside = os.environ.get(_HOST_NS, "")
    try:
        return outside != "" and str(_netns_inode()) != outside
    except OSError:
        return False


def _netns_inode() -> int:
    return os.stat("/proc/self/ns/net").st_ino


def add_loopback_address(ip: str) -> None:
    """Put ``ip``/32 on ``lo`` so that a node can publish a non-loopback InternalIP (the API
    server refuses to proxy to loopback).  Refuses outside the test-made namespace: such an
    address must never exist on the host (docs/design/control-plane.md, "Loopback only")."""
    if not isolated():
        raise RuntimeError(f"refusing to add {ip} outside the e2e network namespace")
    exe = shutil.which("ip")
    if exe is None:
        raise RuntimeError("the `ip` command (iproute2) is needed to add a node address")
    proc = subprocess.run(
        [exe, "addr", "add", f"{ip}/32", "dev", "lo"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 and "File exists" not in proc.stderr:
        raise RuntimeError(f"ip addr add {ip}/32 dev lo: {proc.stderr.strip()}")


def add_veth_address(name: str, ip: str) -> None:
    """Give ``ip``/32 its own interface ``name`` (one end of a veth pair whose peer stays in the
    namespace), for a process that fingerprints one interface as its address — a Nomad client
    (docs/design/nomad.md, "The e2e cluster").  Like ``add_loopback_address`` it refuses outside
    the test-made namespace; an existing interface is reused."""
    if not isolated():
        raise RuntimeError(f"refusing to add {name} ({ip}) outside the e2e network namespace")
    exe = shutil.which("ip")
    if exe is None:
        raise RuntimeError("the `ip` command (iproute2) is needed to add an interface")

    def ip_cmd(*args: str, ok: str = "") -> None:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
        if proc.returncode != 0 and not (ok and ok in proc.stderr):
            raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")

    ip_cmd("link", "add", name, "type", "veth", "peer", "name", f"{name}p", ok="File exists")
    ip_cmd("addr", "add", f"{ip}/32", "dev", name, ok="File exists")
    ip_cmd("link", "set", name, "up")
    ip_cmd("link", "set", f"{name}p", "up")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def enter_private_network() -> None:
    """Move the calling thread (call it from the main thread, before any server starts) into a
    fresh network namespace with only ``lo``, up.  Only inside the namespace this module made:
    a parallel e2e worker must never leave the host's network for a namespace it cannot see."""
    if not isolated():
        raise RuntimeError("refusing to unshare the network outside the e2e network namespace")
    if _libc().unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
    bring_loopback_up()


def _die_with_parent() -> None:
    """SIGKILL this process (and what it ``exec``s, e.g. ``unshare``) when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def can_unshare() -> str:
    """Empty string when ``unshare --net --pid`` works here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    exe = shutil.which("unshare")
    if exe is None:
        return "no unshare(1)"
    probe = subprocess.run(
        [exe, *_UNSHARE_FLAGS, "true"], capture_output=True, text=True, check=False
    )
    return "" if probe.returncode == 0 else (probe.stderr.strip() or f"exit {probe.returncode}")


_UNSHARE_FLAGS = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc")


def _others() -> dict[int, str]:
    """Every process of this PID namespace but its init (this process), reaping the zombies
    among them: pid → command line."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if stat[stat.rindex(")") + 2 :].startswith("Z"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            continue
        found[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def leftovers(grace: float = LEFTOVER_GRACE) -> dict[int, str]:
    """The processes still alive ``grace`` seconds after the command ended (none: {})."""
    deadline = time.monotonic() + grace
    while True:
        alive = _others()
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def run_as_init(command: Sequence[str], *, grace: float = LEFTOVER_GRACE) -> int:
    """PID 1 of the namespace: run ``command``, reap orphans, forward SIGTERM/SIGHUP/SIGQUIT
    (SIGINT reaches the command from the terminal by itself: same process group), then fail
    when anything outlived the command.  Returns the exit status to leave with."""
    child = os.fork()
    if child == 0:  # pragma: no cover - replaced by exec
        try:
            os.execvp(command[0], list(command))
        finally:
            os._exit(127)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # pragma: no cover - the command is our child
            return 1
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            rc = 128 - code if code < 0 else code
            break
    left = leftovers(grace)
    if left:
        print(
            f"vkgate netns: {len(left)} process(es) outlived the command "
            f"(killed now; nothing may survive a run):",
            file=sys.stderr,
        )
        for pid, cmd in sorted(left.items()):
            print(f"  pid {pid}: {cmd[:300]}", file=sys.stderr)
        sys.stderr.flush()
        return rc or 1
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--require", action="store_true", help="fail if no namespace")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    if os.environ.pop(_INIT, None) == "1":
        bring_loopback_up()
        return run_as_init(command)
    why = can_unshare()
    if why:
        msg = f"vkgate netns: no isolated network namespace ({why}); running without it"
        if args.require:
            print(msg.replace("running without it", "refusing (--require)"), file=sys.stderr)
            return 2
        print(msg, file=sys.stderr, flush=True)
        os.execvp(command[0], command)
    env = dict(os.environ, **{_MARK: "1", _HOST_NS: str(_netns_inode()), _INIT: "1"})
    unshare = shutil.which("unshare") or "unshare"
    argv2 = [unshare, *_UNSHARE_FLAGS, "--", sys.executable, "-m", "devstack.netns", "--", *command]
    _die_with_parent()
    os.execvpe(argv2[0], argv2, env)


if __name__ == "__main__":
    raise SystemExit(main())
