"""A private Docker daemon on a unix socket, and a busybox image made without any registry.

Nomad's docker driver is what ``templates/nomad/job.j2`` (the default template) uses, so the e2e
tier runs it for real.  The daemon is Debian's ``docker.io`` ``dockerd``, started so that it
touches nothing outside its temp dir and opens no port:

* its own socket, ``--data-root``, ``--exec-root``, ``--pidfile`` and an empty
  ``--config-file`` (``/etc/docker/daemon.json`` is not read) under one temp dir;
* no network plumbing: ``--bridge=none --iptables=false --ip6tables=false --ip-forward=false
  --ip-masq=false`` (containers get the ``none``/``host`` networks only; no ``docker0``, no NAT);
* ``--storage-driver=vfs``: plain directories, works inside containers where overlayfs on
  overlayfs does not (slower to build layers, irrelevant for a 2 MB image).

The image is ``docker import`` of a root filesystem holding Debian's static busybox
(``busybox-static``, ``/bin/busybox``) and a symlink per applet, tagged ``busybox:1.36`` (the
image the tests and samples name), with a default command that prints ``IMAGE_GREETING`` so a
pod without a command visibly runs the image's own entrypoint; the same root fs with ``sleep``
as its command is ``PAUSE_IMAGE``, the infra container of bridge-mode allocations.  Nothing is
pulled, ever.

API (also used to build other images): ``start_dockerd()`` is a context manager yielding a
``Dockerd`` (``socket``, ``host`` = ``unix://…``, ``env`` with ``DOCKER_HOST``, ``docker(*args)``);
``launch_dockerd()`` is the same without the ``with`` (the caller calls ``stop()``);
``make_busybox_image(d)`` imports the image, ``make_pause_image(d)`` the infra image.  Requirements missing (not root, no ``dockerd``,
no static busybox) raise ``BinaryUnavailable`` with a one-line reason; ``.ci/run`` installs
them (``apt-get install docker.io busybox-static``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devstack.process import BinaryUnavailable, DevstackError, Proc, wait_for

DOCKERD = "/usr/sbin/dockerd"
BUSYBOX = "/bin/busybox"
IMAGE = "busybox:1.36"
IMAGE_GREETING = "hello from the busybox image's own command"
#: The docker driver's ``infra_image`` (the container that holds a bridge-mode allocation's
#: network namespace): Nomad's default is pulled from a registry, so the e2e tier imports its
#: own — the busybox root fs whose command sleeps forever (``make_pause_image``).
PAUSE_IMAGE = "vkgate/pause:1"
PAUSE_COMMAND = ("/bin/sleep", "2147483647")
DAEMON_FLAGS = (
    "--bridge=none",
    "--iptables=false",
    "--ip6tables=false",
    "--ip-forward=false",
    "--ip-masq=false",
    "--storage-driver=vfs",
)


def docker_client() -> str:
    """The docker CLI: Debian's (matches its dockerd) first, else any on PATH."""
    for cand in ("/usr/bin/docker", shutil.which("docker")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise BinaryUnavailable("docker CLI not found (apt-get install docker.io)")


def unavailable_reason() -> str | None:
    """Why a private dockerd cannot run here (one line), or None."""
    if os.geteuid() != 0:
        return "dockerd needs root"
    if not os.access(DOCKERD, os.X_OK):
        return f"{DOCKERD} not found (apt-get install docker.io)"
    if not os.access(BUSYBOX, os.X_OK):
        return f"{BUSYBOX} not found (apt-get install busybox-static)"
    try:
        docker_client()
    except BinaryUnavailable as exc:
        return str(exc)
    return None


@dataclass
class Dockerd:
    """A running private ``dockerd``."""

    workdir: Path
    socket: Path
    proc: Proc
    ready_seconds: float = 0.0
    _stopped: bool = field(default=False, repr=False)

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def docker(
        self,
        *args: str,
        input: bytes | None = None,
        timeout: float = 120,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run the docker CLI against this daemon; raises ``DevstackError`` on failure."""
        argv = [docker_client(), *args]
        env = {
            **os.environ,
            **self.env,
            "DOCKER_CONFIG": str(self.workdir / "client"),
            **(env or {}),
        }
        proc = subprocess.run(
            argv, input=input, capture_output=True, env=env, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise DevstackError(
                f"`docker {' '.join(args)}` exited {proc.returncode}: "
                f"{proc.stderr.decode(errors='replace').strip()[-500:]}"
            )
        return proc

    def stop(self) -> None:
        """Stop the daemon (it stops its containers) and remove its directories."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.proc.stop(timeout=20)
        finally:
            unmount_below(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)


def unmount_below(root: Path) -> None:
    """Lazily unmount what dockerd left mounted under ``root`` (observed: its network
    namespace file ``exec/netns/default`` survives a stop), deepest first."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = str(root).rstrip("/") + "/"
    points = [ln.split()[1] for ln in lines if len(ln.split()) > 1]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False, timeout=10)


def launch_dockerd(*, workdir: Path | None = None, timeout: float = 60.0) -> Dockerd:
    """Start a private dockerd and wait until it answers; the caller must ``stop()`` it."""
    reason = unavailable_reason()
    if reason:
        raise BinaryUnavailable(reason)
    # A short path: unix socket paths are limited to 108 bytes.
    wd = workdir or Path(tempfile.mkdtemp(prefix="vkgate-docker-"))
    sock = wd / "docker.sock"
    (wd / "daemon.json").write_text("{}\n")
    argv = [
        DOCKERD,
        f"--config-file={wd / 'daemon.json'}",
        f"--host=unix://{sock}",
        f"--data-root={wd / 'data'}",
        f"--exec-root={wd / 'exec'}",
        f"--pidfile={wd / 'docker.pid'}",
        *DAEMON_FLAGS,
    ]
    started = time.monotonic()
    proc = Proc("dockerd", argv, log_file=wd / "dockerd.log", cwd=wd)
    d = Dockerd(workdir=wd, socket=sock, proc=proc)
    try:
        wait_for("dockerd", lambda: _answers(d), timeout=timeout, interval=0.25, proc=proc)
    except BaseException:
        d.stop()
        raise
    d.ready_seconds = time.monotonic() - started
    return d


def _answers(d: Dockerd) -> bool:
    if not d.socket.exists():
        return False
    try:
        d.docker("version", "--format", "{{.Server.Version}}", timeout=10)
    except (DevstackError, subprocess.TimeoutExpired):
        return False
    return True


@contextlib.contextmanager
def start_dockerd(*, workdir: Path | None = None, timeout: float = 60.0) -> Iterator[Dockerd]:
    d = launch_dockerd(workdir=workdir, timeout=timeout)
    try:
        yield d
    finally:
        d.stop()


def busybox_rootfs_tar(busybox: str = BUSYBOX) -> bytes:
    """A tar of ``/bin/busybox`` plus one symlink per applet, ``/tmp`` and ``/etc/passwd``."""
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for d in ("bin", "etc", "root", "proc", "sys", "dev"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_file("bin/busybox", Path(busybox).read_bytes(), 0o755)
        for applet in applets:
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n")
        add_file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    return buf.getvalue()


def make_busybox_image(
    d: Dockerd, *, tag: str = IMAGE, cmd: Sequence[str] = ("/bin/echo", IMAGE_GREETING)
) -> str:
    """Import the busybox root filesystem as ``tag`` (default command ``cmd``); its image ID."""
    change = f"CMD {json.dumps(list(cmd))}"
    out = d.docker("import", "--change", change, "-", tag, input=busybox_rootfs_tar())
    return out.stdout.decode().strip()


def make_pause_image(d: Dockerd, *, tag: str = PAUSE_IMAGE) -> str:
    """Import the infra (pause) image: busybox's ``sleep`` as PID 1 keeps the allocation's
    network namespace while its tasks come and go (docs/design/nomad.md, "Docker tier")."""
    return make_busybox_image(d, tag=tag, cmd=PAUSE_COMMAND)
