"""Output schema of the Nomad backend (``translators.render.schemas`` language), published in its spec."""

from __future__ import annotations

from translators.render.schemas import Schema

_STR_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}

_NOMAD_TASK: Schema = {
    "type": "object",
    "required": ["Name", "Driver"],
    "properties": {
        "Name": {"type": "string", "minLength": 1},
        "Driver": {"type": "string", "minLength": 1},
        "Config": {"type": "object"},
        "Env": _STR_MAP,
        "Meta": _STR_MAP,
        "Resources": {
            "type": "object",
            "properties": {
                "CPU": {"type": "integer", "minimum": 1},
                "Cores": {"type": "integer", "minimum": 0},
                "MemoryMB": {"type": "integer", "minimum": 10},
                "MemoryMaxMB": {"type": "integer", "minimum": 0},
            },
        },
        "Lifecycle": {
            "type": ["object", "null"],
            "properties": {"Hook": {"enum": ["prestart", "poststart", "poststop"]}},
        },
        "KillTimeout": {"type": "integer", "minimum": 0},
        "Templates": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["DestPath"],
                "properties": {
                    "DestPath": {"type": "string", "minLength": 1},
                    "EmbeddedTmpl": {"type": "string"},
                },
            },
        },
    },
}

_NOMAD_JOB: Schema = {
    "type": "object",
    "required": ["ID", "TaskGroups"],
    "properties": {
        "ID": {"type": "string", "pattern": r"^[^\s\x00]{1,}$", "maxLength": 128},
        "Name": {"type": "string"},
        "Type": {"enum": ["service", "batch", "system", "sysbatch"]},
        "Priority": {"type": "integer", "minimum": 1, "maximum": 100},
        "Datacenters": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "Meta": _STR_MAP,
        "Constraints": {
            "type": ["array", "null"],
            "items": {"type": "object", "required": ["Operand"]},
        },
        "TaskGroups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["Name", "Tasks"],
                "properties": {
                    "Name": {"type": "string", "minLength": 1},
                    "Count": {"type": "integer", "minimum": 0},
                    "Tasks": {"type": "array", "minItems": 1, "items": _NOMAD_TASK},
                    "Meta": _STR_MAP,
                },
            },
        },
    },
}

NOMAD: Schema = {
    "anyOf": [
        {"type": "object", "required": ["Job"], "properties": {"Job": _NOMAD_JOB}},
        _NOMAD_JOB,
    ]
}
