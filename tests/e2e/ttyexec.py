"""``kubectl exec -it`` with a real terminal on kubectl's side (util-linux ``script``)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import unavailable

#: Prints the tty and its size, reads one line, exits 4.
REMOTE = "sleep 0.5; tty; stty size; read x; echo got $x; exit 4"


def _read_to_end(p: subprocess.Popen[bytes], timeout: float) -> bytes:
    """``p``'s stdout until it ends, leaving its stdin open (``communicate`` would close it)."""
    assert p.stdout is not None
    fd, out, deadline = p.stdout.fileno(), bytearray(), time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(p.args, timeout, output=bytes(out))
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                return bytes(out)
            out += chunk


def exec_it(kubeconfig: Path, kubectl_path: Path, pod: str, *, remote: str = REMOTE) -> Any:
    """Run ``sh -c remote`` in ``pod`` through ``kubectl exec -it`` in a 100x30 pty, type
    ``hello``; returns (output with CRLF → LF, exit code).  Without ``script``: ``unavailable``.

    stdin stays open until the session has ended: at EOF on its stdin ``script`` types the
    terminal's EOF (^D) into kubectl, which sends it to the remote shell as input.  (An open
    stdin is also what lets Nomad 1.6.3's docker driver lose the exit code at random:
    docs/design/nomad.md, "Exec WebSocket".)"""
    script = shutil.which("script")
    if script is None:
        unavailable("util-linux `script` is not installed: no pty for kubectl exec -it")
    argv: Sequence[str] = (str(kubectl_path), f"--kubeconfig={kubeconfig}", "exec", "-it", pod)
    inner = f"stty cols 100 rows 30; {' '.join(argv)} -- sh -c '{remote}'"
    with subprocess.Popen(
        [script, "-qefc", inner, "/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as p:
        assert p.stdin is not None
        try:
            time.sleep(1.0)
            p.stdin.write(b"hello\n")
            p.stdin.flush()  # stdin stays open: the remote exit alone ends the session
            out_b = _read_to_end(p, 30)
            p.wait(timeout=10)
        finally:
            p.kill()
    return out_b.decode(errors="replace").replace("\r\n", "\n"), p.returncode
