"""The vkgate container image, built here without pulling anything (docs/design/image.md).

The ``Containerfile`` at the repository root takes its base image as a build argument
(``BASE``).  Public bases cannot be pulled on these machines, so CI makes one:

* **base** — a Debian bookworm root filesystem with ``python3`` (3.11), ``python3-venv`` and
  CA certificates, made by ``mmdebstrap`` from Debian's packages and ``docker import``-ed.  The
  tarball is cached by content (suite, package list, mirror) under
  ``~/.cache/vkgate/images/``;
* **wheelhouse** — every wheel ``vkgate[all]`` needs (plus the build backend), from PyPI,
  cached by the hash of ``pyproject.toml`` and ``constraints.txt`` (every version pinned).

Both need the network, so ``python -m devstack.image prepare`` runs before the e2e tier
(``.ci/run``), outside its network namespace.  Inside it, ``build_image`` builds vkgate's own
wheel with ``--no-index`` and runs ``docker build --network=none`` on a private dockerd
(``devstack.docker``): same Containerfile, another base.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from devstack.build import cache_root
from devstack.docker import Dockerd
from devstack.process import BinaryUnavailable, DevstackError

REPO = Path(__file__).resolve().parents[1]
CONTAINERFILE = REPO / "Containerfile"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
TAG = "vkgate:test"


def images_dir() -> Path:
    return cache_root() / "images"


def base_key() -> str:
    text = "\n".join([SUITE, MIRROR, *PACKAGES, "minbase"])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_tarball() -> Path:
    return images_dir() / f"base-{SUITE}-{base_key()}.tar"


def wheelhouse() -> Path:
    pinned = (REPO / "pyproject.toml").read_bytes() + (REPO / "constraints.txt").read_bytes()
    digest = hashlib.sha256(pinned).hexdigest()[:12]
    return images_dir() / f"wheels-{digest}"


def make_base(*, say: object = print) -> Path:
    """The bookworm + python3 root filesystem tarball (cached)."""
    out = base_tarball()
    if out.exists():
        return out
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise BinaryUnavailable("mmdebstrap is not installed (apt-get install mmdebstrap)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.tar")
    cmd = [
        mmdebstrap,
        "--variant=minbase",
        "--mode=root",
        f"--include={','.join(PACKAGES)}",
        "--aptopt=Acquire::Retries=3",
        SUITE,
        str(tmp),
        MIRROR,
    ]
    print("[image] " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    tmp.replace(out)
    return out


def make_wheelhouse(python: str = sys.executable) -> Path:
    """Wheels for ``vkgate[all]``'s dependencies and the build backend (cached)."""
    out = wheelhouse()
    if (out / ".complete").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix="wheels-", dir=out.parent if out.parent.exists() else None))
    pins = ["-c", str(REPO / "constraints.txt")]
    cmd = [python, "-m", "pip", "wheel", "--quiet", *pins, "-w", str(tmp), f"{REPO}[all]"]
    subprocess.run(cmd, check=True)
    subprocess.run(
        [python, "-m", "pip", "download", "--quiet", *pins, "-d", str(tmp), "setuptools", "wheel"],
        check=True,
    )
    for own in tmp.glob("vkgate-*.whl"):
        own.unlink()  # built from the checkout at image build time
    if out.exists():
        shutil.rmtree(out)
    tmp.replace(out)
    (out / ".complete").write_text("")
    return out


def prepared() -> str | None:
    """None when base and wheelhouse exist, else what is missing."""
    missing = [str(p) for p in (base_tarball(), wheelhouse() / ".complete") if not p.exists()]
    return None if not missing else f"run `python -m devstack.image prepare` ({missing})"


def build_image(d: Dockerd, *, tag: str = TAG, python: str = sys.executable) -> str:
    """Import the base and build the Containerfile on it, offline.  Returns ``tag``."""
    why = prepared()
    if why:
        raise BinaryUnavailable(why)
    base = f"vkgate-base:{base_key()}"
    started = time.monotonic()
    try:
        d.docker("image", "inspect", base)
    except DevstackError:
        d.docker("import", str(base_tarball()), base, timeout=600)
        print(f"[image] base imported in {time.monotonic() - started:.0f}s", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="vkgate-image-") as tmp:
        ctx = Path(tmp)
        wheels = ctx / "wheels"
        shutil.copytree(wheelhouse(), wheels)
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-index",
                f"--find-links={wheels}",
                "-w",
                str(wheels),
                str(REPO),
            ],
            check=True,
        )
        shutil.copy2(CONTAINERFILE, ctx / "Containerfile")
        d.docker(
            "build",
            "--network=none",
            f"--build-arg=BASE={base}",
            "-t",
            tag,
            "-f",
            str(ctx / "Containerfile"),
            str(ctx),
            env={"DOCKER_BUILDKIT": "0"},
            timeout=900,
        )
    print(f"[image] {tag} built in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return tag


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prepare the offline inputs of the vkgate image")
    parser.add_argument("command", choices=["prepare"])
    parser.parse_args(argv)
    print(f"[image] base: {make_base()}", file=sys.stderr)
    print(f"[image] wheelhouse: {make_wheelhouse()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
