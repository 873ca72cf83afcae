"""Renderer: error locations, output parsing, sources and their order, overlay/trial, lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from translators.base import (
    EnvVar,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    VolumeFile,
)
from translators.render.engine import (
    Renderer,
    backend_of,
    is_entry_template,
    mask_secrets,
    pod_context,
)


def pod(
    namespace: str = "ns", annotations: dict | None = None, team: str = "", template: str = ""
) -> ResolvedPod:
    return ResolvedPod(
        namespace=namespace,
        name="web",
        uid="u-1",
        node_name="vk",
        pod={
            "metadata": {"name": "web", "namespace": namespace, "annotations": annotations or {}},
            "spec": {"restartPolicy": "Never"},
        },
        containers=(
            ResolvedContainer(
                name="app",
                image="nginx",
                env=(EnvVar("A", "1"), EnvVar("PW", "hunter22", secret=True)),
            ),
        ),
        volumes=(
            ResolvedVolume(
                name="s", kind="secret", files=(VolumeFile("key", b"topsecretvalue", secret=True),)
            ),
        ),
        team=team,
        template=template,
    )


# -- errors carry the real template and line ---------------------------------------------


@pytest.mark.parametrize(
    ("templates", "entry", "where", "message"),
    [
        ({"a.j2": "{\n\n{% if %}\n}"}, "a.j2", ("a.j2", 3), "syntax error"),
        ({"a.j2": "{\n  {{ nope }}\n}"}, "a.j2", ("a.j2", 2), "'nope' is undefined"),
        ({"a.j2": "{\n{{ pod.metadata.nope }}"}, "a.j2", ("a.j2", 2), "undefined"),
        ({"a.j2": "1\n2\n{{ 1 // 0 }}"}, "a.j2", ("a.j2", 3), "ZeroDivisionError"),
        (
            {"a.j2": "{% include 'b.j2' %}", "b.j2": "x\ny\n{{ missing }}"},
            "a.j2",
            ("b.j2", 3),
            "undefined",
        ),
        (
            {"a.j2": "{% include 'b.j2' %}", "b.j2": "x\n{% for %}"},
            "a.j2",
            ("b.j2", 2),
            "syntax error",
        ),
        (
            {"a.j2": "\n{% include 'gone.j2' %}"},
            "a.j2",
            ("a.j2", 2),
            "included template not found: gone.j2",
        ),
        (
            {
                "base.j2": "{\n{% block b %}{% endblock %}\n}",
                "child.j2": "{% extends 'base.j2' %}\n{% block b %}\n\n{{ x.y }}{% endblock %}",
            },
            "child.j2",
            ("child.j2", 4),
            "undefined",
        ),
        (
            {
                "base.j2": "{\n{{ undefined_in_base }}\n{% block b %}{% endblock %}}",
                "child.j2": "{% extends 'base.j2' %}{% block b %}{% endblock %}",
            },
            "child.j2",
            ("base.j2", 2),
            "undefined",
        ),
        (
            {
                "base.j2": "{% macro m() %}\n{{ 'x'|cpu_mhz }}{% endmacro %}",
                "a.j2": "{% from 'base.j2' import m %}\n{{ m() }}",
            },
            "a.j2",
            ("base.j2", 2),
            "cpu_mhz",
        ),
        ({"a.j2": "x"}, "missing.j2", ("missing.j2", None), "template not found: missing.j2"),
    ],
)
def test_errors_name_template_and_line(
    templates: dict, entry: str, where: tuple, message: str
) -> None:
    r = Renderer(overlay=templates)
    with pytest.raises(TranslationError, match=message) as info:
        r.render_text(entry, {"pod": {"metadata": {}}, "x": {}})
    assert (info.value.template, info.value.line) == where
    assert str(info.value).startswith(where[0] + (f":{where[1]}" if where[1] else ""))


def test_json_and_yaml_output() -> None:
    r = Renderer(
        overlay={
            "t/a.j2": '{"a": [1, 2]}',
            "t/b.yaml.j2": "a:\n  - {{ n }}\n",
            "t/bad.j2": '{\n"a": 1,\n}',
        }
    )
    assert r.render("t/a.j2", {}) == {"a": [1, 2]}
    assert r.render("t/b.yaml.j2", {"n": 3}) == {"a": [3]}
    with pytest.raises(TranslationError, match=r"not valid JSON: .* output line 3: '}'") as info:
        r.render("t/bad.j2", {})
    assert info.value.template == "t/bad.j2"


def test_context_is_plain_data_and_strict() -> None:
    r = Renderer(
        overlay={
            "t.j2": "{{ meta.name }} {{ containers[0].env.A }} {{ volumes[0].files[0].content_b64 }} "
            "{{ restart_policy }} {{ team }} {{ node.name }} {{ node.zone }} {{ backend_info.k }}"
        }
    )
    ctx = pod_context(
        pod(team="ml"), backend="nomad", settings={}, extra={"k": 7}, node={"zone": "z1"}
    )
    assert r.render_text("t.j2", ctx) == "web 1 dG9wc2VjcmV0dmFsdWU= Never ml vk z1 7"


# -- sources ------------------------------------------------------------------------------


def test_source_order_overlay_then_dirs_then_packaged(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "one", tmp_path / "two"
    (d1 / "t").mkdir(parents=True)
    (d2 / "t").mkdir(parents=True)
    (d1 / "t" / "x.j2").write_text("dir1")
    (d2 / "t" / "x.j2").write_text("dir2")
    (d2 / "t" / "y.j2").write_text("dir2-y")
    r = Renderer(extra_dirs=[d1, d2])
    assert r.render_text("t/x.j2", {}) == "dir1"
    assert r.render_text("t/y.j2", {}) == "dir2-y"
    assert r.origin("t/x.j2") == str(d1 / "t" / "x.j2")
    r.set_overlay({"t/x.j2": "overlay"})
    assert r.render_text("t/x.j2", {}) == "overlay"
    assert r.origin("t/x.j2") == "overlay"
    assert {"t/x.j2", "t/y.j2"} <= set(r.list_templates())
    r.set_overlay({})
    assert r.render_text("t/x.j2", {}) == "dir1"


def test_packaged_templates_are_found() -> None:
    r = Renderer()
    names = r.list_templates()
    assert any(n.startswith("nomad/") for n in names), names
    assert r.origin(names[0]).endswith(names[0])


def test_changed_file_is_picked_up(tmp_path: Path) -> None:
    import os

    (tmp_path / "x.j2").write_text("v1")
    r = Renderer(extra_dirs=[tmp_path])
    assert r.render_text("x.j2", {}) == "v1"
    (tmp_path / "x.j2").write_text("v2")
    os.utime(tmp_path / "x.j2", (1, 1))
    assert r.render_text("x.j2", {}) == "v2"


@pytest.mark.parametrize("name", ["../x.j2", "/etc/passwd", "a//b.j2", "./a.j2"])
def test_template_names_cannot_escape(name: str) -> None:
    with pytest.raises(TranslationError, match="not found"):
        Renderer().render_text(name, {})
    assert not Renderer().exists(name)


def test_overlay_change_bumps_version_and_notifies_once() -> None:
    r = Renderer()
    calls: list[int] = []
    unsubscribe = r.subscribe(lambda: calls.append(r.version))
    r.set_overlay({"a.j2": "1"})
    r.set_overlay({"a.j2": "1"})  # unchanged: no notification
    r.set_overlay({"a.j2": "2"})
    unsubscribe()
    r.set_overlay({})
    assert calls == [1, 2] and r.version == 3


def test_trial_renders_a_candidate_without_touching_the_live_overlay() -> None:
    r = Renderer(overlay={"a.j2": "live"})
    with r.trial({"a.j2": "candidate", "b.j2": "new"}):
        assert r.render_text("a.j2", {}) == "candidate"
        assert r.exists("b.j2")
    assert r.render_text("a.j2", {}) == "live"
    assert not r.exists("b.j2")


def test_check_compiles_referenced_templates() -> None:
    r = Renderer(overlay={"a.j2": "{% include 'b.j2' %}", "b.j2": "{% if %}", "ok.j2": "{{ x }}"})
    r.check("ok.j2")  # undefined names are a render-time matter
    with pytest.raises(TranslationError, match="syntax error") as info:
        r.check("a.j2")
    assert (info.value.template, info.value.line) == ("b.j2", 1)


def test_entry_templates_and_backends() -> None:
    assert backend_of("nomad/job.j2") == "nomad"
    assert backend_of("teams/ml/nomad/job.j2") == "nomad"
    assert backend_of("teams/ml/job.j2") == ""
    assert is_entry_template("zun/container.j2")
    assert not is_entry_template("nomad/_macros.j2")
    assert not is_entry_template("nomad/_parts/x.j2")
    assert not is_entry_template("README.md")


# -- extending a default template ---------------------------------------------------------

BASE = """{
  "Job": {
    "ID": {{ meta.name|tojson }},
    "Priority": {% block priority %}50{% endblock %},
    "Meta": {% block meta %}{"k8s.name": {{ meta.name|tojson }}}{% endblock %}
  }
}"""


def test_team_template_overrides_one_block() -> None:
    r = Renderer(
        overlay={
            "fx/job.j2": BASE,
            "teams/ml/fx/job.j2": '{% extends "fx/job.j2" %}{% block priority %}80{% endblock %}',
        }
    )
    ctx = pod_context(pod(), backend="", settings={})
    assert r.render("fx/job.j2", ctx) == {
        "Job": {"ID": "web", "Priority": 50, "Meta": {"k8s.name": "web"}}
    }
    assert r.render("teams/ml/fx/job.j2", ctx) == {
        "Job": {"ID": "web", "Priority": 80, "Meta": {"k8s.name": "web"}}
    }


def test_team_template_extends_the_packaged_nomad_job() -> None:
    """The real nomad/job.j2, through the Nomad backend's render_spec: one block changes."""
    import dataclasses

    from gateway.templating.offline import SpecRenderer, load_samples, resolve
    from translators.base import Renderable

    r = Renderer(
        overlay={
            "teams/ml/nomad/job.j2": '{% extends "nomad/job.j2" %}'
            "{% block env %}{{ dict(c.env, TEAM=team) | tojson }}{% endblock %}"
        }
    )
    sr = SpecRenderer(r, backend="nomad", settings={})
    if not isinstance(sr.translator, Renderable):
        pytest.skip("the nomad backend has no render_spec")
    sample = next(s for s in load_samples() if s.name == "multi-container")
    base = resolve(sample.inputs, node_name="vk").pod
    default = sr.render(base)
    team = sr.render(dataclasses.replace(base, team="ml"))
    tasks = team["Job"]["TaskGroups"][0]["Tasks"]
    assert [t["Env"]["TEAM"] for t in tasks] == ["ml", "ml"]
    for t in tasks:
        del t["Env"]["TEAM"]
    assert team == default


# -- which template a pod gets ------------------------------------------------------------


def lookup_renderer(**kwargs: object) -> Renderer:
    return Renderer(
        overlay={
            "fx/job.j2": "{}",
            "fx/gpu.j2": "{}",
            "fx/other.j2": "{}",
            "teams/ml/fx/job.j2": "{}",
            "teams/ml/fx/big.j2": "{}",
            "teams/web/fx/x.j2": "{}",
        },
        **kwargs,
    )  # type: ignore[arg-type]


def test_default_when_no_team_and_no_annotation() -> None:
    choice = lookup_renderer().select(pod(), backend="fx", default="fx/job.j2")
    assert (choice.name, choice.reason, choice.team) == ("fx/job.j2", "default", "")
    assert choice.steps[-1] == "3. backend default 'fx/job.j2': used"


def test_team_from_pod_or_from_config_map() -> None:
    r = lookup_renderer(teams={"ml-ns": "ml"})
    assert r.select(pod(team="ml"), backend="fx", default="fx/job.j2").name == "teams/ml/fx/job.j2"
    choice = r.select(pod(namespace="ml-ns"), backend="fx", default="fx/job.j2")
    assert (choice.name, choice.reason, choice.team) == ("teams/ml/fx/job.j2", "team", "ml")
    assert "templates.teams" in choice.steps[0]
    # a team without its own version of the default gets the default
    assert r.select(pod(team="web"), backend="fx", default="fx/job.j2").name == "fx/job.j2"


def test_annotation_wins_when_allowed() -> None:
    r = lookup_renderer(allowed={"ml": ["fx/gpu*"], "*": ["fx/other.j2"]})
    ann = {"vkgate.io/template": "fx/gpu.j2"}
    assert (
        r.select(pod(team="ml", annotations=ann), backend="fx", default="fx/job.j2").reason
        == "annotation"
    )
    # own team prefix and the everyone-list are always fine
    assert (
        r.select(
            pod(team="ml", annotations={"vkgate.io/template": "teams/ml/fx/big.j2"}),
            backend="fx",
            default="fx/job.j2",
        ).name
        == "teams/ml/fx/big.j2"
    )
    assert (
        r.select(
            pod(annotations={"vkgate.io/template": "fx/other.j2"}),
            backend="fx",
            default="fx/job.j2",
        ).name
        == "fx/other.j2"
    )


@pytest.mark.parametrize(
    ("team", "requested", "match"),
    [
        ("web", "fx/gpu.j2", "not allowed for team web"),
        ("", "fx/gpu.j2", r"not allowed for team \(none\)"),
        ("web", "teams/ml/fx/big.j2", "not allowed"),
        ("ml", "fx/missing.j2", "does not exist"),
    ],
)
def test_annotation_refused_with_the_field(team: str, requested: str, match: str) -> None:
    r = lookup_renderer(allowed={"ml": ["fx/*"]})
    with pytest.raises(TranslationError, match=match) as info:
        r.select(
            pod(team=team, annotations={"vkgate.io/template": requested}),
            backend="fx",
            default="fx/job.j2",
        )
    assert info.value.field == "metadata.annotations[vkgate.io/template]"


def test_override_bypasses_the_allow_list_and_config_default_wins() -> None:
    r = lookup_renderer(defaults={"fx": "fx/other.j2"})
    assert (
        r.select(pod(), backend="fx", default="fx/job.j2", override="fx/gpu.j2").reason
        == "override"
    )
    assert r.select(pod(), backend="fx", default="fx/job.j2").name == "fx/other.j2"


# -- secrets ------------------------------------------------------------------------------


def test_mask_secrets_masks_env_and_files_in_any_form() -> None:
    p = pod()
    spec = {
        "Env": {"A": "1", "PW": "hunter22"},
        "cmd": "login --password=hunter22",
        "files": ["topsecretvalue", "dG9wc2VjcmV0dmFsdWU="],
        "n": 5,
    }
    masked = mask_secrets(spec, p)
    assert masked == {
        "Env": {"A": "1", "PW": "*****"},
        "cmd": "login --password=*****",
        "files": ["*****", "*****"],
        "n": 5,
    }
    assert spec["Env"]["PW"] == "hunter22"


def test_unrestricted_lifts_the_allow_list_for_checks_only() -> None:
    r = lookup_renderer()
    p = pod(annotations={"vkgate.io/template": "fx/gpu.j2"})
    with r.unrestricted():
        assert r.select(p, backend="fx", default="fx/job.j2").name == "fx/gpu.j2"
    with pytest.raises(TranslationError, match="not allowed"):
        r.select(p, backend="fx", default="fx/job.j2")
