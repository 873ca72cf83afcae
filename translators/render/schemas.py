"""Output schemas: what a rendered spec must look like before a backend client sends it.

A template can produce any JSON; these schemas catch the mistakes a backend would otherwise
reject late (or worse, accept): a missing task, a CPU given as ``"500m"``, an env value that
is a number.  They describe only the fields each client reads or sends, and leave the rest
open (``additionalProperties`` is allowed unless a schema says otherwise).

The schema language is a small JSON-Schema subset — ``type`` (str or list), ``properties``,
``required``, ``additionalProperties`` (bool or schema), ``items``, ``minItems``,
``maxItems``, ``enum``, ``const``, ``pattern``, ``minLength``, ``maxLength``, ``minimum``,
``maximum``, ``anyOf`` — written as plain dicts so a backend package can adjust its own with
``register_schema(kind, schema)`` without a dependency.  ``validate`` raises ``SchemaError``
with the dotted/indexed path of the first bad field (``Job.TaskGroups[0].Tasks[0].Env.A``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Schema = Mapping[str, Any]


class SchemaError(ValueError):
    """``path`` is the offending field (``""`` for the document itself)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '(document)'}: {message}")
        self.path = path
        self.detail = message


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is(value: Any, type_name: str) -> bool:
    if type_name in ("integer", "number") and isinstance(value, bool):
        return False
    if type_name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[type_name])


def _depth(path: str) -> int:
    return path.count(".") + path.count("[") + (1 if path else 0)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def validate(value: Any, schema: Schema, path: str = "") -> None:
    """Raise ``SchemaError`` for the first violation of ``schema`` in ``value``."""
    if "anyOf" in schema:
        errors: list[SchemaError] = []
        for option in schema["anyOf"]:
            try:
                validate(value, option, path)
                break
            except SchemaError as exc:
                errors.append(exc)
        else:
            # The most useful error is where the closest option failed: the deepest one, and
            # a wrong value rather than a missing field of an option that does not apply.
            best = max(errors, key=lambda e: (_depth(e.path), "missing" not in e.detail))
            raise best
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is(value, t) for t in names):
            raise SchemaError(path, f"expected {' or '.join(names)}, got {_describe(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        raise SchemaError(path, f"must be {schema['const']!r}, got {value!r}")
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        allowed = ", ".join(repr(v) for v in schema["enum"])
        raise SchemaError(path, f"must be one of {allowed}, got {value!r}")
    if isinstance(value, str):
        _check_string(value, schema, path)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(path, f"must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(path, f"must be <= {schema['maximum']}, got {value}")
    if isinstance(value, dict):
        _check_object(value, schema, path)
    if isinstance(value, list):
        _check_array(value, schema, path)


def _check_string(value: str, schema: Schema, path: str) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise SchemaError(path, f"must have at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise SchemaError(
            path, f"must have at most {schema['maxLength']} characters, has {len(value)}"
        )
    if "pattern" in schema and not re.search(schema["pattern"], value):
        raise SchemaError(path, f"{_short(value)!r} does not match {schema['pattern']!r}")


def _check_object(value: dict[str, Any], schema: Schema, path: str) -> None:
    for key in schema.get("required", ()):
        if key not in value:
            raise SchemaError(_join(path, key), "required field is missing")
    props: Mapping[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = _join(path, str(key))
        if key in props:
            validate(item, props[key], sub)
        elif extra is False:
            raise SchemaError(sub, f"unknown field (known: {', '.join(sorted(props))})")
        elif isinstance(extra, Mapping):
            validate(item, extra, sub)


def _check_array(value: list[Any], schema: Schema, path: str) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        raise SchemaError(path, f"must have at least {schema['minItems']} item(s)")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise SchemaError(path, f"must have at most {schema['maxItems']} item(s)")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            validate(item, items, f"{path}[{i}]")


def _describe(value: Any) -> str:
    kind = {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value))
    if value is None:
        return "null"
    if kind is None:
        kind = "integer" if isinstance(value, int) else type(value).__name__
        if isinstance(value, float):
            kind = "number"
    return f"{kind} {_short(repr(value))}"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- the registry

#: Schemas set with ``register_schema`` (they win over the one a backend's spec publishes).
_REGISTRY: dict[str, Schema] = {}


def register_schema(kind: str, schema: Schema | None) -> None:
    """Set (or with ``None`` remove) the output schema of a backend kind."""
    if schema is None:
        _REGISTRY.pop(kind, None)
    else:
        _REGISTRY[kind] = schema


def schema_for(kind: str) -> Schema | None:
    """The registered schema of ``kind``, else the one its backend spec publishes."""
    if kind in _REGISTRY:
        return _REGISTRY[kind]
    from translators import plugins

    try:
        return plugins.load(kind).schema
    except plugins.PluginError:
        return None


def validate_spec(kind: str, spec: Any) -> None:
    """Validate ``spec`` against the schema of ``kind``; a backend without one → accepted."""
    schema = schema_for(kind)
    if schema is not None:
        validate(spec, schema)
