"""A template rendered in the agent's own process (``render_workers = 0``) cannot change what
it is given: the sandbox lets it call ``dict.update``, so it renders from a copy and vkgate's
values stay vkgate's for every backend's checks after rendering
(docs/design/threat-model.md, "Render, then admit")."""

from __future__ import annotations

from typing import Any

from translators.render.engine import Renderer

FORGE = '{{ info.update({"job_id": "victim"}) or "" }}{{ info["names"].append("x") or "" }}'


def context() -> dict[str, Any]:
    return {"info": {"job_id": "mine", "names": []}}


def test_a_template_in_process_cannot_change_its_context() -> None:
    renderer = Renderer(overlay={"t/forge.j2": FORGE + "ok", "t/json.j2": FORGE + '{"a": 1}'})
    given = context()
    assert renderer.render_text("t/forge.j2", given) == "ok"
    assert renderer.render("t/json.j2", given, schema="") == {"a": 1}
    assert given == context()
