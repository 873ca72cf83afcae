"""What an update may apply in place: a registered job vs the freshly rendered one."""

from __future__ import annotations

import copy
from typing import Any

from translators.nomad.submit import job_changes


def job(**task: Any) -> dict[str, Any]:
    base = {
        "Name": "app",
        "Config": {"image": "nginx:1.27", "args": ["-g", "daemon off;"]},
        "Env": {"A": "1"},
        "Resources": {"CPU": 200, "MemoryMB": 300},
        "Templates": [{"DestPath": "local/vkgate/cfg/a", "EmbeddedTmpl": "x=1"}],
    }
    base.update(task)
    return {"TaskGroups": [{"Name": "pod", "Tasks": [base]}]}


def test_identical_jobs_have_no_changes_even_with_server_defaults() -> None:
    registered = copy.deepcopy(job())
    registered["TaskGroups"][0]["Tasks"][0]["Resources"].update({"Cores": 0, "DiskMB": 0})
    assert job_changes(registered, job()) == set()


def test_image_and_file_changes_are_told_apart_from_the_rest() -> None:
    assert job_changes(
        job(), job(Config={"image": "nginx:1.28", "args": ["-g", "daemon off;"]})
    ) == {"image"}
    assert job_changes(
        job(), job(Templates=[{"DestPath": "local/vkgate/cfg/a", "EmbeddedTmpl": "x=2"}])
    ) == {"files"}
    assert job_changes(job(), job(Env={"A": "2"})) == {"other"}
    assert job_changes(job(), job(Resources={"CPU": 400, "MemoryMB": 300})) == {"other"}
    assert job_changes(job(), {"TaskGroups": [{"Tasks": []}]}) == {"other"}
