"""docs/backends/nomad.md (and docs/design/nomad.md) against the code: the pod annotations the
guide lists are the ones the Nomad backend reads, no annotation or label the docs name is
unknown to the code, and each row of "What is supported" says what the translator's declared
capabilities are. The ``kubectl logs`` flags are probed against the translator in
tests/contract/nomad/test_nomad_guide_logs.py.

Annotation reads are found with ``ast``: ``<x>annotations<y>.get(key)`` and
``<x>annotations<y>[key]`` in the code that handles a Nomad pod, the key resolved from string
literals, module constants, ``+`` and f-strings. A key that cannot be resolved fails the test
instead of being skipped.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from devstack.components import NOMAD_VERSION
from gateway.kubelet.api import attach, portforward
from gateway.pods.resolve import features as admission
from translators.base import Executor, LogOptions, LogReader, MetricsSource
from translators.base import TranslatorContext as Context
from translators.nomad import NomadTranslator

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "backends" / "nomad.md"
DESIGN = ROOT / "docs" / "design" / "nomad.md"
#: The code a Nomad pod goes through: the backend, the shared renderer (template annotation)
#: and the gateway's pod handling.
POD_CODE = [
    *sorted((ROOT / "translators" / "nomad").glob("*.py")),
    ROOT / "translators" / "render" / "engine.py",
    ROOT / "translators" / "base.py",
    *sorted((ROOT / "gateway" / "pods").rglob("*.py")),
]
#: Where a name the docs use may be defined (labels, Meta keys, selector prefixes ...).
ALL_CODE = sorted({*(ROOT / "translators").rglob("*.py"), *(ROOT / "gateway").rglob("*.py")})
#: An annotation, label or Meta key of vkgate's (or one that looks like Nomad's).
DOC_KEY = re.compile(r"[A-Za-z0-9.-]*(?:vkgate\.io|nomad\.hashicorp\.com)/[A-Za-z0-9._-]*")


class Unresolved(Exception):
    pass


class _Strings:
    """Module-level string constants of one module and a resolver for key expressions."""

    def __init__(self, tree: ast.Module) -> None:
        self.constants: dict[str, ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.constants[target.id] = node.value
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.value is not None
            ):
                self.constants[node.target.id] = node.value

    def resolve(self, expr: ast.expr, depth: int = 0) -> str:
        if depth > 10:
            raise Unresolved(ast.unparse(expr))
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Name) and expr.id in self.constants:
            return self.resolve(self.constants[expr.id], depth + 1)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self.resolve(expr.left, depth + 1) + self.resolve(expr.right, depth + 1)
        if isinstance(expr, ast.JoinedStr):
            parts = []
            for value in expr.values:
                inner = value.value if isinstance(value, ast.FormattedValue) else value
                parts.append(self.resolve(inner, depth + 1))
            return "".join(parts)
        raise Unresolved(ast.unparse(expr))


def _name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""


def annotation_reads(path: Path) -> Iterator[tuple[str, int]]:
    """(key, line) of every read of an annotations mapping in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    strings = _Strings(tree)
    for node in ast.walk(tree):
        key: ast.expr | None = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and "annotations" in _name(node.func.value)
            and node.args
        ):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and "annotations" in _name(node.value):
            key = node.slice
        if key is None:
            continue
        try:
            yield strings.resolve(key), node.lineno
        except Unresolved as exc:
            pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno}: annotation key {exc} unresolved")


def code_strings(path: Path) -> set[str]:
    """Every string the module builds from literals (docstrings left out)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    strings = _Strings(tree)
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                out.add(node.value)
        elif isinstance(node, ast.BinOp | ast.JoinedStr):
            with contextlib.suppress(Unresolved):
                out.add(strings.resolve(node))
    return out


def section(text: str, heading: str) -> str:
    """The body of a Markdown section (up to the next heading of the same or a higher level)."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n") + len(heading) + 1
    stop = re.compile(rf"^#{{1,{len(level)}}} ", re.MULTILINE).search(text, start)
    return text[start : stop.start() if stop else len(text)]


def table(text: str) -> dict[str, list[str]]:
    """First cell → the other cells of every row of the Markdown table(s) in ``text``."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= {"|", "-", " "}:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def ticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


GUIDE_TEXT = GUIDE.read_text()
SUPPORT = table(section(GUIDE_TEXT, "## What is supported").split("### ", 1)[0])


# --------------------------------------------------------------------------- annotations


def test_the_guides_annotation_table_is_what_the_nomad_backend_reads() -> None:
    rows = table(section(GUIDE_TEXT, "### Pod annotations"))
    documented = {ticked(first)[0] for first in rows if ticked(first)}
    read: dict[str, str] = {}
    for path in POD_CODE:
        for key, line in annotation_reads(path):
            read.setdefault(key, f"{path.relative_to(ROOT)}:{line}")
    assert "vkgate.io/nomad-datacenters" in read, "the scan must find overrides.py's reads"
    missing = {k: where for k, where in read.items() if k not in documented}
    assert not missing, f"read by the code, not in the guide's annotation table: {missing}"
    unread = documented - set(read)
    assert not unread, f"in the guide's annotation table, read nowhere: {sorted(unread)}"


@pytest.mark.parametrize("doc", [GUIDE, DESIGN], ids=["guide", "design"])
def test_every_vkgate_key_the_docs_name_exists_in_the_code(doc: Path) -> None:
    known: set[str] = set()
    for path in ALL_CODE:
        known |= code_strings(path)
    keys = set(DOC_KEY.findall(doc.read_text()))
    assert keys, f"{doc.name} names no key: the pattern is wrong"

    def exists(key: str) -> bool:
        if key in known:
            return True
        # a prefix the docs complete with a placeholder: meta.nomad.vkgate.io/<key>
        return key.endswith(("/", "-")) and any(k.startswith(key) for k in known)

    unknown = sorted(k for k in keys if not exists(k))
    assert not unknown, f"{doc.relative_to(ROOT)} names keys no code uses: {unknown}"


def test_a_key_the_code_does_not_know_is_caught() -> None:
    """The check above is not vacuous: the name the design doc used to give is unknown."""
    known: set[str] = set()
    for path in ALL_CODE:
        known |= code_strings(path)
    assert "nomad.hashicorp.com/datacenters" not in known
    assert "vkgate.io/nomad-node-pool" in known  # built as ANNOTATION + "node-pool"


# --------------------------------------------------------------------------- support table


@pytest.fixture
def translator() -> NomadTranslator:
    return NomadTranslator(Context("vk-guide", {"address": "http://nomad.test:4646"}), environ={})


def test_the_capability_rows_match_what_the_translator_implements(
    translator: NomadTranslator,
) -> None:
    def says_yes(feature: str) -> bool:
        text = SUPPORT[feature][0]
        assert text.startswith(("yes", "no (501)")), f"{feature}: {text}"
        return text.startswith("yes")

    assert says_yes("`kubectl logs`") == isinstance(translator, LogReader)
    assert says_yes("`kubectl exec`") == isinstance(translator, Executor)
    assert says_yes("`kubectl attach`") == (attach.refusal(translator, stdin=False) == "")
    assert ("`-i` → 501" in SUPPORT["`kubectl attach`"][0]) == bool(
        attach.refusal(translator, stdin=True)
    )
    assert says_yes("`kubectl port-forward`") == (portforward.refusal(translator) == "")
    metrics = next(k for k in SUPPORT if k.startswith("metrics"))
    assert says_yes(metrics) == isinstance(translator, MetricsSource)


def test_the_volumes_row_lists_the_volume_kinds_the_translator_declares(
    translator: NomadTranslator,
) -> None:
    supported = SUPPORT["volumes"][0].split(";", 1)[0]
    assert set(ticked(supported)) == set(translator.features.volume_kinds)


#: A pod spec that uses each feature of gateway/pods/resolve/features.py.
FEATURE_PODS: Mapping[str, dict[str, Any]] = {
    "hostNetwork": {"hostNetwork": True},
    "hostPID": {"hostPID": True},
    "hostIPC": {"hostIPC": True},
    "shareProcessNamespace": {"shareProcessNamespace": True},
    "privileged": {"containers": [{"name": "a", "securityContext": {"privileged": True}}]},
    "hostPort": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
    "initContainers": {"initContainers": [{"name": "i"}]},
    "sidecars": {"initContainers": [{"name": "s", "restartPolicy": "Always"}]},
    "ephemeralContainers": {"ephemeralContainers": [{"name": "debug"}]},
}


def test_the_pod_features_row_is_what_admission_lets_through(translator: NomadTranslator) -> None:
    first_column = [
        re.split(r"\s{2,}", line, maxsplit=1)[0]
        for line in (admission.__doc__ or "").splitlines()
        if line.startswith("``")
    ]
    names = {name for cell in first_column for name in re.findall(r"``(\w+)``", cell)}
    assert names == set(FEATURE_PODS), "gateway/pods/resolve/features.py lists other features"
    supported_text, refused_text = SUPPORT["pod features"][0].split("; refused", 1)
    supported, refused = set(ticked(supported_text)), set(ticked(refused_text))
    refused.discard("UnsupportedPodFeature")
    assert supported == set(translator.features.pod_features)
    assert supported | refused == names and not supported & refused
    for name, spec in FEATURE_PODS.items():
        pod = {"spec": {"containers": [{"name": "a"}], **spec}}
        found = {u.feature for u in admission.check_pod(pod, translator.features, backend="nomad")}
        assert (name in found) == (name in refused), name


def test_the_logs_flags_table_has_a_row_for_every_kubelet_log_option() -> None:
    rows = table(section(GUIDE_TEXT, "### kubectl logs flags"))
    queries = {q for first in rows for q in re.findall(r"\(`?([a-zA-Z, `]+?)`?\)", first)}
    named = {q.strip(" `") for group in queries for q in group.split(",")}
    query_of = {
        "follow": "follow",
        "tail_lines": "tailLines",
        "since": "sinceSeconds",
        "timestamps": "timestamps",
        "limit_bytes": "limitBytes",
        "previous": "previous",
        "stream": "stream",
    }
    assert {f.name for f in dataclasses.fields(LogOptions)} == set(query_of)
    assert set(query_of.values()) <= named, sorted(set(query_of.values()) - named)


# --------------------------------------------------------------------------- versions


def test_the_guide_names_the_nomad_version_the_e2e_tier_builds() -> None:
    text = section(GUIDE_TEXT, "## Supported Nomad versions")
    assert f"**{NOMAD_VERSION}**" in text
    found = re.search(r"Nomad \*\*(\d+\.\d+) \N{EN DASH} (\d+\.\d+)\*\*", text)
    assert found, "the guide states the supported range as Nomad **x.y <en dash> x.y**"
    low, high = found.groups()
    built = tuple(int(x) for x in NOMAD_VERSION.split(".")[:2])
    assert tuple(map(int, low.split("."))) <= built <= tuple(map(int, high.split(".")))
