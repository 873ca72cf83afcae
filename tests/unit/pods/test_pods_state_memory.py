"""What the pod controller keeps per pod stays small: no stale status copies, no old pod versions."""

from __future__ import annotations

from typing import Any, cast

from gateway.kube.reflector import lean
from gateway.pods.memory import changed_fields, same_objects, snapshot
from gateway.pods.status.manager import ECHO_WINDOW, EchoMemory
from vkgate_core.kubetypes import Pod


def written_uids(echo: EchoMemory) -> list[str]:
    return echo.uids()


def test_status_copies_are_dropped_once_past_the_echo_window() -> None:
    echo = EchoMemory()
    for i in range(100):
        echo.remember(f"u{i}", "1", {"phase": "Running"}, at=float(i) * 0.01)
    assert len(echo) == 100  # all within the window
    echo.remember("u5", "2", {}, at=ECHO_WINDOW + 0.5)  # 0.5 s later than the window of u0..u50
    assert written_uids(echo)[0] == "u51" and written_uids(echo)[-1] == "u5"
    assert len(echo) == 50


def pod(labels: dict[str, str] | None, image: str, phase: str) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": image}]},
        "status": {"phase": phase},
    }
    if labels is not None:
        raw["metadata"]["labels"] = labels
    return cast(Pod, raw)


def test_unchanged_parts_are_shared_between_versions_and_changes_are_still_seen() -> None:
    v1 = cast(Pod, lean(cast(dict[str, Any], pod({"a": "1"}, "img:1", "Pending"))))
    v2 = cast(
        Pod,
        lean(cast(dict[str, Any], pod({"a": "1"}, "img:1", "Running")), cast(dict[str, Any], v1)),
    )
    assert v2["spec"] is v1["spec"] and v2["metadata"]["labels"] is v1["metadata"]["labels"]
    snap = snapshot(v1)
    assert "status" not in snap and same_objects(snap, v2)
    v3 = cast(
        Pod, lean(cast(dict[str, Any], pod(None, "img:1", "Running")), cast(dict[str, Any], v2))
    )
    assert not same_objects(snap, v3)  # labels removed: not the same objects
    assert changed_fields(snap, v3) == ["metadata.labels"]
    v4 = cast(
        Pod,
        lean(cast(dict[str, Any], pod({"a": "1"}, "img:2", "Running")), cast(dict[str, Any], v2)),
    )
    assert v4["spec"] is not v1["spec"] and not same_objects(snap, v4)
    assert changed_fields(snap, v4) == ["spec.containers"]
