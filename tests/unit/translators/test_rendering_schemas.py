"""Output schemas: the validator and the per-backend registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from translators.base import TranslationError
from translators.render import schemas
from translators.render.engine import Renderer


def job(**task: object) -> dict:
    t = {
        "Name": "app",
        "Driver": "docker",
        "Env": {"A": "1"},
        "Resources": {"CPU": 100, "MemoryMB": 64},
    }
    t.update(task)
    return {"Job": {"ID": "k8s-ns-web", "TaskGroups": [{"Name": "pod", "Tasks": [t]}]}}


def test_valid_specs_pass() -> None:
    schemas.validate_spec("nomad", job())
    schemas.validate_spec("nomad", job()["Job"])
    schemas.validate_spec(
        "zun", {"image": "nginx", "cpu": 0.5, "memory": 256, "environment": {"A": "1"}}
    )
    schemas.validate_spec("zun", {"template": {"kind": "capsule"}})
    schemas.validate_spec("batch", {"id": "vk-abc_1", "commandLine": "/bin/true"})
    schemas.validate_spec("unknown-backend", {"anything": 1})


@pytest.mark.parametrize(
    ("kind", "spec", "path", "message"),
    [
        ("nomad", job(Env={"A": 1}), "Job.TaskGroups[0].Tasks[0].Env.A", "expected string"),
        (
            "nomad",
            job(Resources={"CPU": "500m"}),
            "Job.TaskGroups[0].Tasks[0].Resources.CPU",
            "expected integer",
        ),
        ("nomad", job(Resources={"CPU": 0}), "Job.TaskGroups[0].Tasks[0].Resources.CPU", ">= 1"),
        ("nomad", {"Job": {"ID": "a b", "TaskGroups": []}}, "Job.ID", "does not match"),
        ("nomad", {"Job": {"ID": "x", "TaskGroups": []}}, "Job.TaskGroups", "at least 1"),
        ("nomad", job(Driver=None), "Job.TaskGroups[0].Tasks[0].Driver", "expected string"),
        ("zun", {"image": "", "cpu": 1}, "image", "at least 1"),
        ("batch", {"id": "has space", "commandLine": "x"}, "id", "does not match"),
        ("batch", {"id": "a", "commandLine": "x" * 40000}, "commandLine", "at most 32768"),
        ("batch", {"id": "a"}, "commandLine", "required"),
    ],
)
def test_violations_name_the_field(kind: str, spec: dict, path: str, message: str) -> None:
    with pytest.raises(schemas.SchemaError, match=message) as info:
        schemas.validate_spec(kind, spec)
    assert info.value.path == path


def test_validator_keywords() -> None:
    schema = {
        "type": "object",
        "required": ["a"],
        "additionalProperties": False,
        "properties": {
            "a": {"enum": [1, 2]},
            "b": {"type": ["string", "null"], "maxLength": 2},
            "c": {"type": "array", "maxItems": 1, "items": {"const": 0}},
        },
    }
    schemas.validate({"a": 1, "b": None, "c": [0]}, schema)
    for bad, path in [
        ({"a": 3}, "a"),
        ({"a": 1, "z": 0}, "z"),
        ({"a": 1, "b": "abc"}, "b"),
        ({"a": 1, "c": [0, 0]}, "c"),
        ({"a": 1, "c": [1]}, "c[0]"),
        ({"a": True}, "a"),
    ]:
        with pytest.raises(schemas.SchemaError) as info:
            schemas.validate(bad, schema)
        assert info.value.path == path
    with pytest.raises(schemas.SchemaError, match="expected integer"):
        schemas.validate(True, {"type": "integer"})


@pytest.fixture
def custom_schema() -> Iterator[None]:
    old = schemas.schema_for("batch")
    schemas.register_schema("batch", {"type": "object", "required": ["mine"]})
    yield
    schemas.register_schema("batch", old)


def test_backends_can_register_their_schema(custom_schema: None) -> None:
    r = Renderer(overlay={"batch/t.j2": '{"id": "x"}'})
    with pytest.raises(TranslationError) as info:
        r.render("batch/t.j2", {"backend": "batch"})
    assert info.value.field == "mine" and info.value.template == "batch/t.j2"


def test_render_validates_against_the_context_backend() -> None:
    r = Renderer(
        overlay={
            "nomad/bad.j2": '{"Job": {"ID": "x", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "docker", "Env": {"N": {{ n }}}}]}]}}'
        }
    )
    with pytest.raises(TranslationError, match="does not match the nomad schema") as info:
        r.render("nomad/bad.j2", {"backend": "nomad", "n": 5})
    assert info.value.field == "Job.TaskGroups[0].Tasks[0].Env.N"
    assert r.render("nomad/bad.j2", {"backend": "nomad", "n": 5}, schema="")["Job"]["ID"] == "x"
    assert Renderer(overlay=r.overlay, validate=False).render(
        "nomad/bad.j2", {"backend": "nomad", "n": 5}
    )
