"""Build the real control-plane binaries from their Go modules, once, cached by version.

Why a wrapper module per component: kube-apiserver, etcd and Nomad all carry ``replace``
directives in their own go.mod, so ``go install pkg@version`` refuses them.  A throw-away
wrapper module that *requires* the upstream module at the pinned version (plus the replaces
upstream needs) builds them with the plain ``go`` command and the module proxy, nothing else.

Layout under the cache root (``$VKGATE_CACHE``, default ``~/.cache/vkgate``)::

    wrappers/<name>-<version>/go.mod   the wrapper module
    bin/<name>-<version>               the built binary (only this is checked for "already built")

Only the first run pays; later runs find ``bin/<name>-<version>`` and return at once.
Run as ``python -m gateway.devstack.build [component ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("vkgate.devstack.build")

K8S_VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
NOMAD_VERSION = "1.11.3"
NOMAD_COMMIT = "173ab08a0210"

#: Staging modules of k8s.io/kubernetes 1.36/1.37 (real-control-plane.md §2).
K8S_STAGING = [
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
    "streaming",
]

#: Candidate versions for ``github.com/hashicorp/nomad/api``.  Nomad's go.mod only builds
#: because of ``=> ./api``, and the nested module is not part of the nomad module zip.  The
#: pseudo-version of the tagged commit is the right one, but the module proxy reachable here
#: answers "403 This module version is not available" for it, so the build falls back to the
#: newest api pseudo-version the proxy serves (the api package only grows; checked by building).
NOMAD_API_CANDIDATES = (
    "v0.0.0-20260311091027-173ab08a0210",
    "v0.0.0-20260907080526-08ef8f3d26da",
)


def cache_root() -> Path:
    return Path(os.environ.get("VKGATE_CACHE") or Path.home() / ".cache" / "vkgate")


@dataclass(frozen=True)
class Component:
    """One binary built from a wrapper module."""

    name: str
    version: str
    module: str
    package: str
    requires: tuple[str, ...]
    replaces: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def binary(self) -> Path:
        return cache_root() / "bin" / f"{self.name}-{self.version}"

    @property
    def wrapper_dir(self) -> Path:
        return cache_root() / "wrappers" / f"{self.name}-{self.version}"

    def go_mod(self) -> str:
        lines = [f"module vkgate.local/build/{self.name}", "", "go 1.26.0", ""]
        lines += [f"require {r}" for r in self.requires]
        if self.replaces:
            lines += ["", "replace ("] + [f"\t{r}" for r in self.replaces] + [")"]
        return "\n".join(lines) + "\n"


def _k8s_ldflags(version: str) -> tuple[str, ...]:
    major, minor, _ = version.split(".")
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    values = {
        "gitVersion": f"v{version}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": date,
    }
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{k}={v}" for k, v in values.items()]
    return tuple(flags)


def kube_apiserver(version: str = K8S_VERSION) -> Component:
    staging = f"0.{version.split('.', 1)[1]}"
    return Component(
        name="kube-apiserver",
        version=version,
        module="k8s.io/kubernetes",
        package="k8s.io/kubernetes/cmd/kube-apiserver",
        requires=(f"k8s.io/kubernetes v{version}",),
        replaces=tuple(f"k8s.io/{m} => k8s.io/{m} v{staging}" for m in K8S_STAGING),
        ldflags=_k8s_ldflags(version),
    )


def etcd(version: str = ETCD_VERSION) -> Component:
    return Component(
        name="etcd",
        version=version,
        module="go.etcd.io/etcd/server/v3",
        package="go.etcd.io/etcd/server/v3",
        requires=(
            f"go.etcd.io/etcd/server/v3 v{version}",
            f"go.etcd.io/etcd/etcdctl/v3 v{version}",
        ),
        ldflags=("-s", "-w"),
    )


def nomad(version: str = NOMAD_VERSION, api_version: str = NOMAD_API_CANDIDATES[0]) -> Component:
    return Component(
        name="nomad",
        version=version,
        module="github.com/hashicorp/nomad",
        package="github.com/hashicorp/nomad",
        requires=(f"github.com/hashicorp/nomad v{version}",),
        replaces=(
            "github.com/Microsoft/go-winio => github.com/endocrimes/go-winio "
            "v0.4.13-0.20190628114223-fb47a8b41948",
            "github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1",
            f"github.com/hashicorp/nomad/api => github.com/hashicorp/nomad/api {api_version}",
        ),
        tags=("hashicorpmetrics", "codegen_generated"),
        ldflags=("-s", "-w", f"-X github.com/hashicorp/nomad/version.GitCommit={NOMAD_COMMIT}"),
    )


class BuildError(RuntimeError):
    """A component could not be built; the message carries the failing command and its output."""


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"})
    return env


def _run(cmd: Sequence[str], *, cwd: Path) -> None:
    log.info("$ %s", " ".join(cmd))
    proc = subprocess.run(
        list(cmd), cwd=cwd, env=_go_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-4000:]
        raise BuildError(f"`{' '.join(cmd)}` failed in {cwd} (exit {proc.returncode}):\n{tail}")


@contextlib.contextmanager
def _build_lock(component: Component) -> Iterator[None]:
    """One build per component at a time across processes (tests, `vkgate dev`, CI)."""
    path = cache_root() / "locks" / f"{component.name}-{component.version}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building %s", component.name)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def go_available() -> bool:
    return shutil.which("go") is not None


def build(component: Component) -> Path:
    """Return the cached binary, building it first when it is missing."""
    if component.binary.exists():
        return component.binary
    if not go_available():
        raise BuildError(
            "the `go` command is not on PATH; install Go 1.26 to build " + component.name
        )
    with _build_lock(component):
        if component.binary.exists():  # built by the process we waited for
            return component.binary
        return _build_locked(component)


def _build_locked(component: Component) -> Path:
    started = time.monotonic()
    wrapper = component.wrapper_dir
    wrapper.mkdir(parents=True, exist_ok=True)
    (wrapper / "go.mod").write_text(component.go_mod())
    (wrapper / "go.sum").unlink(missing_ok=True)
    _run(
        [
            "go",
            "get",
            component.package + "@v" + component.version
            if component.package == component.module
            else component.package,
        ],
        cwd=wrapper,
    )
    component.binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = component.binary.with_name(component.binary.name + ".tmp")
    cmd = ["go", "build", "-trimpath", "-o", str(tmp)]
    if component.tags:
        cmd += ["-tags", ",".join(component.tags)]
    if component.ldflags:
        cmd += ["-ldflags", " ".join(component.ldflags)]
    cmd.append(component.package)
    _run(cmd, cwd=wrapper)
    tmp.rename(component.binary)
    log.info("built %s in %.0f s", component.binary, time.monotonic() - started)
    return component.binary


def build_nomad() -> Path:
    """Nomad needs its api module pinned to a version the proxy serves (see candidates)."""
    errors: list[str] = []
    for api in NOMAD_API_CANDIDATES:
        comp = nomad(api_version=api)
        try:
            return build(comp)
        except BuildError as exc:
            errors.append(str(exc))
            log.warning("nomad with api %s failed, trying next candidate", api)
    raise BuildError("nomad could not be built with any api version:\n" + "\n".join(errors))


BUILDERS = {
    "etcd": lambda: build(etcd()),
    "kube-apiserver": lambda: build(kube_apiserver()),
    "nomad": build_nomad,
}


def binary_path(name: str) -> Path:
    """Where the cached binary for ``name`` lives (whether or not it exists yet)."""
    comp = {"etcd": etcd(), "kube-apiserver": kube_apiserver(), "nomad": nomad()}[name]
    return comp.binary


def ensure(name: str) -> Path:
    """The binary for ``name``, built (once, under a lock) when missing; raises BuildError."""
    path = binary_path(name)
    return path if path.exists() else BUILDERS[name]()


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "components", nargs="*", help=f"any of {', '.join(BUILDERS)} (default: all)"
    )
    parser.add_argument(
        "--if-go-available",
        action="store_true",
        help="without Go on PATH, say so and exit 0 (unless CI=true); the e2e tier then skips",
    )
    args = parser.parse_args(argv)
    unknown = [c for c in args.components if c not in BUILDERS]
    if unknown:
        parser.error(
            f"unknown component(s) {', '.join(unknown)}; choose from {', '.join(BUILDERS)}"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.if_go_available and not go_available() and not _ci():
        print("go not on PATH: not building etcd/kube-apiserver/nomad (e2e tests will skip)")
        return 0
    failed = 0
    args.components = args.components or list(BUILDERS)
    for name in args.components:
        try:
            print(f"{name}: {BUILDERS[name]()}", flush=True)
        except BuildError as exc:
            print(f"{name}: BUILD FAILED\n{exc}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
