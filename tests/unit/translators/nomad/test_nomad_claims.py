"""PersistentVolumeClaims → Nomad volume requests and mounts (translators/nomad/claims.py)."""

from __future__ import annotations

from typing import Any

import pytest

from translators.base import (
    ResolvedContainer,
    ResolvedVolume,
    TranslationError,
    UnsupportedError,
    VolumeMount,
)
from translators.nomad.claims import check_rendered, group_volume, task_mounts


def claim(
    spec: dict[str, Any], *, annotations: dict[str, str] | None = None, ro: bool = False
) -> ResolvedVolume:
    pv = {"metadata": {"name": "pv", "annotations": annotations or {}}, "spec": spec}
    return ResolvedVolume(
        "data", "persistentVolumeClaim", claim="c", claim_read_only=ro, persistent_volume=pv
    )


def test_host_volume_annotation_names_the_client_host_volume() -> None:
    vol = claim(
        {"local": {"path": "/x"}}, annotations={"nomad.vkgate.io/host-volume": "hv"}, ro=True
    )
    assert group_volume(vol) == {"Name": "data", "Type": "host", "Source": "hv", "ReadOnly": True}


@pytest.mark.parametrize(
    ("modes", "ro", "access"),
    [
        (["ReadWriteOnce"], False, "single-node-writer"),
        (["ReadWriteOncePod"], False, "single-node-writer"),
        (["ReadWriteMany"], False, "multi-node-multi-writer"),
        (["ReadWriteOnce"], True, "single-node-reader-only"),
        (["ReadOnlyMany"], True, "multi-node-reader-only"),
    ],
)
def test_csi_access_mode_follows_the_pv_and_readonly(
    modes: list[str], ro: bool, access: str
) -> None:
    vol = claim({"accessModes": modes, "csi": {"driver": "d", "volumeHandle": "vol-1"}}, ro=ro)
    assert group_volume(vol) == {
        "Name": "data",
        "Type": "csi",
        "Source": "vol-1",
        "ReadOnly": ro,
        "AccessMode": access,
        "AttachmentMode": "file-system",
    }


def test_a_read_only_many_pv_mounted_writable_is_refused() -> None:
    vol = claim({"accessModes": ["ReadOnlyMany"], "csi": {"driver": "d", "volumeHandle": "v"}})
    with pytest.raises(UnsupportedError, match="allow no writer") as err:
        group_volume(vol)
    assert err.value.field == "spec.volumes[data].persistentVolumeClaim"


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"nfs": {"server": "s", "path": "/"}}, "a nfs PersistentVolume has no Nomad volume"),
        ({"volumeMode": "Block", "csi": {"volumeHandle": "v"}}, "volumeMode Block"),
    ],
)
def test_other_pvs_are_refused_naming_the_claim(spec: dict[str, Any], text: str) -> None:
    with pytest.raises(UnsupportedError, match=text) as err:
        group_volume(claim(spec))
    assert err.value.reason == "UnsupportedVolume"
    assert 'claim "c" (PersistentVolume "pv")' in str(err.value)


def test_mounts_keep_readonly_and_refuse_subpath() -> None:
    vols = {"data": claim({}, ro=True), "other": ResolvedVolume("other", "emptyDir")}
    c = ResolvedContainer(
        name="app",
        image="x",
        mounts=(VolumeMount("data", "/d"), VolumeMount("other", "/o")),
    )
    assert task_mounts(c, vols) == [{"Volume": "data", "Destination": "/d", "ReadOnly": True}]
    sub = ResolvedContainer(
        name="app", image="x", mounts=(VolumeMount("data", "/d", sub_path="s"),)
    )
    with pytest.raises(UnsupportedError) as err:
        task_mounts(sub, vols)
    assert err.value.field == "spec.containers[app].volumeMounts[/d].subPath"


def test_a_template_that_drops_a_claim_is_refused() -> None:
    mount = {"Volume": "data", "Destination": "/d", "ReadOnly": False}
    info = {"volumes": {"data": {"Type": "host"}}, "tasks": {"app": {"volume_mounts": [mount]}}}
    task = {"Name": "app", "Driver": "docker", "VolumeMounts": [mount]}
    ok = {"TaskGroups": [{"Volumes": {"data": {}}, "Tasks": [task]}]}
    check_rendered(ok, info, template="t")
    with pytest.raises(TranslationError, match="group volume 'data'"):
        check_rendered({"TaskGroups": [{"Tasks": [task]}]}, info, template="t")
    with pytest.raises(TranslationError, match="dropped the mount"):
        bare = {"Name": "app", "Driver": "docker"}
        check_rendered(
            {"TaskGroups": [{"Volumes": {"data": {}}, "Tasks": [bare]}]}, info, template="t"
        )
    raw = {**task, "Driver": "raw_exec"}
    with pytest.raises(UnsupportedError, match="raw_exec driver cannot mount"):
        check_rendered(
            {"TaskGroups": [{"Volumes": {"data": {}}, "Tasks": [raw]}]}, info, template="t"
        )
