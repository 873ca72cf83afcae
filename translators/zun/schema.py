"""Output schema of the Zun backend (``translators.render.schemas`` language), published in its spec."""

from __future__ import annotations

from translators.render.schemas import Schema

_STR_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}

_ZUN_CONTAINER: Schema = {
    "type": "object",
    "required": ["image"],
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string", "minLength": 1},
        "command": {"type": ["array", "string", "null"]},
        "entrypoint": {"type": ["array", "string", "null"]},
        "cpu": {"type": ["number", "null"], "minimum": 0},
        "memory": {"type": ["integer", "string", "null"]},
        "workdir": {"type": ["string", "null"]},
        "environment": _STR_MAP,
        "labels": _STR_MAP,
        "restart_policy": {"type": ["object", "null"]},
        "exposed_ports": {"type": ["object", "null"]},
    },
}

ZUN: Schema = {
    "anyOf": [
        {
            "type": "object",
            "required": ["template"],
            "properties": {"template": {"type": ["object", "string"]}},
        },
        _ZUN_CONTAINER,
    ]
}
