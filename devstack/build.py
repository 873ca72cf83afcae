"""Build the local control plane's binaries from their committed, pinned Go modules.

Nothing here resolves a version: each module folder (``devstack/gomod/<name>/``, see
``components.py``) carries go.mod **and** go.sum, and the builder compiles from a copy of it with
``go build -mod=readonly``.  If the go command would have to change go.mod or go.sum the build
fails (readonly refuses, and the copy is compared with the committed files afterwards).  A pin
change is a reviewed commit made with ``python -m devstack.pins``.

Layout under the cache root (``$VKGATE_CACHE``, default ``~/.cache/vkgate``)::

    wrappers/<module>-<key>/      the copy of the module folder the go command runs in
    bin/<binary>-<version>-<key>  the built binary; <key> hashes the pins and build flags

Builds run one at a time per module across processes (a file lock).  While a build or a wait
for another process's lock runs, a progress line is printed at least every 30 s.  Run as
``python -m devstack.build [binary ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

from devstack.components import (
    ETCD_VERSION,
    K8S_VERSION,
    NOMAD_VERSION,
    Binary,
    Module,
    binaries,
)

__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "NOMAD_VERSION",
    "BuildError",
    "binary_path",
    "build_commands",
    "ensure",
    "go_available",
    "main",
]

log = logging.getLogger("vkgate.devstack.build")

#: How often a running build or a lock wait reports that it is still alive.
PROGRESS_EVERY = 30.0


class BuildError(RuntimeError):
    """A component could not be built; the message carries the failing command and its output."""


def cache_root() -> Path:
    return Path(os.environ.get("VKGATE_CACHE") or Path.home() / ".cache" / "vkgate")


def go_env(*, cgo: bool = False) -> dict[str, str]:
    """The go command's environment: never download a toolchain, never touch go.mod; cgo only
    for a module that needs it (``Module.cgo``)."""
    env = dict(os.environ)
    env.update(
        {"GOTOOLCHAIN": "local", "CGO_ENABLED": "1" if cgo else "0", "GOFLAGS": "-buildvcs=false"}
    )
    return env


def go_available() -> bool:
    return shutil.which("go") is not None


def module_key(module: Module) -> str:
    """Hash of everything that decides the output: pins, sources and flags."""
    h = hashlib.sha256()
    for f in sorted(module.path.iterdir()):
        if f.is_file() and (f.name in {"go.mod", "go.sum"} or f.suffix == ".go"):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(repr((module.tags, module.ldflags, module.cgo)).encode())
    return h.hexdigest()[:10]


def binary_path(name: str) -> Path:
    """Where the cached binary ``name`` lives (whether or not it exists yet)."""
    module = _module_for(name)
    return cache_root() / "bin" / f"{name}-{module.version}-{module_key(module)}"


def _module_for(name: str) -> Module:
    try:
        return binaries()[name]
    except KeyError:
        raise BuildError(f"unknown binary {name!r}; choose from {', '.join(binaries())}") from None


def build_commands(module: Module, binary: Binary, out: Path) -> list[str]:
    """The one go command that builds ``binary`` (pure; tested for ``-mod=readonly``)."""
    cmd = ["go", "test", "-c"] if binary.test else ["go", "build"]
    cmd += ["-mod=readonly", "-trimpath", "-o", str(out)]
    if module.tags:
        cmd += ["-tags", ",".join(module.tags)]
    if module.ldflags:
        cmd += ["-ldflags", " ".join(module.ldflags)]
    cmd.append(binary.package)
    return cmd


def check_pins(module: Module) -> None:
    """A module folder must hold go.mod and go.sum; raise BuildError naming what is missing."""
    for name in ("go.mod", "go.sum"):
        if not (module.path / name).is_file():
            raise BuildError(
                f"{module.path / name} is missing: build modules are committed with go.mod and "
                f"go.sum (regenerate with `python -m devstack.pins {module.folder}`)"
            )


def _progress_run(
    cmd: Sequence[str], *, cwd: Path, step: str, say: Callable[[str], None], cgo: bool = False
) -> None:
    """Run the go command, reporting ``step`` and the elapsed time at least every 30 s."""
    log.info("$ %s", " ".join(cmd))
    started = time.monotonic()
    with (cwd / "build.log").open("w") as out:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=go_env(cgo=cgo), stdout=out, stderr=out)
        while True:
            try:
                rc = proc.wait(timeout=PROGRESS_EVERY)
                break
            except subprocess.TimeoutExpired:
                say(f"{step}: still building ({time.monotonic() - started:.0f} s)")
            except BaseException:
                proc.kill()
                proc.wait()
                raise
    if rc != 0:
        tail = (cwd / "build.log").read_text(errors="replace")[-4000:]
        raise BuildError(f"`{' '.join(cmd)}` failed in {cwd} (exit {rc}):\n{tail}")


@contextlib.contextmanager
def _module_lock(module: Module, *, say: Callable[[str], None]) -> Iterator[None]:
    """One build per module at a time across processes (tests, `vkgate dev`, CI).

    While another process holds the lock this reports every 30 s; SIGTERM during the wait says
    what it stopped waiting for before the process ends.
    """
    path = cache_root() / "locks" / f"{module.folder}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait_for_lock(fh, module, say=say)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wait_for_lock(fh: IO[str], module: Module, *, say: Callable[[str], None]) -> None:
    started = time.monotonic()
    step = f"{module.folder}: waiting for another process's build"
    say(f"{step} (lock {cache_root() / 'locks' / (module.folder + '.lock')})")

    def on_term(signum: int, frame: FrameType | None) -> None:
        say(
            f"SIGTERM: stopped waiting for the {module.folder} build lock after "
            f"{time.monotonic() - started:.0f} s (the other build goes on)"
        )
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    try:
        last = started
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(1.0)
            if time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                say(f"{step} ({last - started:.0f} s)")
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _say(msg: str) -> None:
    print(f"[build] {msg}", file=sys.stderr, flush=True)


def ensure(name: str, *, say: Callable[[str], None] = _say) -> Path:
    """The binary ``name``, built (once, under the module's lock) when missing."""
    path = binary_path(name)
    if path.exists():
        return path
    module = _module_for(name)
    check_pins(module)
    if not go_available():
        raise BuildError(f"the `go` command is not on PATH; install Go 1.26 to build {name}")
    with _module_lock(module, say=say):
        if path.exists():  # built by the process we waited for
            return path
        _build_module(module, say=say)
    return path


def _build_module(module: Module, *, say: Callable[[str], None]) -> None:
    """Build every binary of ``module`` from a copy of its pinned folder (lock held)."""
    key = module_key(module)
    work = cache_root() / "wrappers" / f"{module.folder}-{key}"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(module.path, work)
    bindir = cache_root() / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for binary in module.binaries:
        final = bindir / f"{binary.name}-{module.version}-{key}"
        if final.exists():
            continue
        tmp = final.with_name(final.name + ".tmp")
        started = time.monotonic()
        say(f"building {binary.name} {module.version} from {module.path}")
        _progress_run(
            build_commands(module, binary, tmp),
            cwd=work,
            step=f"{binary.name}",
            say=say,
            cgo=module.cgo,
        )
        _check_unchanged(module, work)
        tmp.rename(final)
        say(f"built {binary.name} in {time.monotonic() - started:.0f} s -> {final}")


def _check_unchanged(module: Module, work: Path) -> None:
    for name in ("go.mod", "go.sum"):
        if (work / name).read_bytes() != (module.path / name).read_bytes():
            raise BuildError(
                f"building {module.folder} changed {name}: the pins are incomplete; regenerate "
                f"with `python -m devstack.pins {module.folder}` and commit the result"
            )


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def main(argv: Sequence[str] | None = None) -> int:
    names = list(binaries())
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binaries", nargs="*", help=f"any of {', '.join(names)} (default: all)")
    parser.add_argument(
        "--if-go-available",
        action="store_true",
        help="without Go on PATH, say so and exit 0 (unless CI=true); the e2e tier then skips",
    )
    args = parser.parse_args(argv)
    unknown = [c for c in args.binaries if c not in names]
    if unknown:
        parser.error(f"unknown binary(ies) {', '.join(unknown)}; choose from {', '.join(names)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.if_go_available and not go_available() and not _ci():
        print("go not on PATH: not building the control plane (e2e tests will skip)")
        return 0
    failed = 0
    for name in args.binaries or names:
        try:
            print(f"{name}: {ensure(name)}", flush=True)
        except BuildError as exc:
            print(f"{name}: BUILD FAILED\n{exc}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
