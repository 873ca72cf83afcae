"""Output schema of the Azure Batch backend (``translators.render.schemas`` language), published in its spec."""

from __future__ import annotations

from translators.render.schemas import Schema

BATCH: Schema = {
    "type": "object",
    "required": ["id", "commandLine"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[A-Za-z0-9_-]{1,64}$"},
        "displayName": {"type": "string", "maxLength": 1024},
        "commandLine": {"type": "string", "maxLength": 32768},
        "containerSettings": {
            "type": ["object", "null"],
            "properties": {"imageName": {"type": "string", "minLength": 1}},
        },
        "environmentSettings": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
            },
        },
        "constraints": {"type": ["object", "null"]},
        "requiredSlots": {"type": "integer", "minimum": 1},
    },
}
