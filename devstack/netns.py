"""Run a command inside a fresh network namespace that has only ``lo``.

Why: the e2e tier's network rule is "loopback only".  Inside a namespace with no other
interface and no route, a stray connection (cloud metadata, an update check, a mistyped
address) fails at once with ENETUNREACH instead of leaving the machine — the rule is enforced,
not just hoped for.

    python -m devstack.netns [--require] -- pytest -m e2e tests/e2e

How: re-run this module under ``unshare --net`` (root only: as non-root we would need a user
namespace, where Nomad believes it is root and fails to create its cgroup), bring ``lo`` up
with one ioctl, then ``exec`` the command.  Where the namespace cannot be created the command
runs unisolated after one line on stderr, or fails with ``--require``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence

_MARK = "VKGATE_NETNS"
#: The network namespace the command was started from (recorded before ``unshare``).
_HOST_NS = "VKGATE_NETNS_OUTSIDE"
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


def can_unshare() -> str:
    """Empty string when ``unshare --net`` works here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    exe = shutil.which("unshare")
    if exe is None:
        return "no unshare(1)"
    probe = subprocess.run([exe, "--net", "true"], capture_output=True, text=True, check=False)
    return "" if probe.returncode == 0 else (probe.stderr.strip() or f"exit {probe.returncode}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--require", action="store_true", help="fail if no namespace")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    if os.environ.get(_MARK) == "1":
        bring_loopback_up()
        os.execvp(command[0], command)
    why = can_unshare()
    if why:
        msg = f"vkgate netns: no isolated network namespace ({why}); running without it"
        if args.require:
            print(msg.replace("running without it", "refusing (--require)"), file=sys.stderr)
            return 2
        print(msg, file=sys.stderr, flush=True)
        os.execvp(command[0], command)
    env = dict(os.environ, **{_MARK: "1", _HOST_NS: str(_netns_inode())})
    unshare = shutil.which("unshare") or "unshare"
    argv2 = [unshare, "--net", "--", sys.executable, "-m", "devstack.netns", "--", *command]
    os.execvpe(argv2[0], argv2, env)


if __name__ == "__main__":
    raise SystemExit(main())
