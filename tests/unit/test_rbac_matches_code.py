"""The deploy/ RBAC is exactly what the code calls: every Kubernetes API call in gateway/ is
granted, and every grant is used by some call (docs/design/rbac.md).

The calls are found in the source with ``ast``: ``<client>.get/list/watch/create/patch/replace/
delete(path, ...)`` and ``Reflector(client, path, ...)`` (list + watch).  Path expressions are
resolved statically — string literals, f-strings, module constants, ``self.path``-style
properties and ``self._path(x)`` helpers in the same class, ``+`` concatenation.  A path whose
resource cannot be resolved fails this test (it must not be skipped silently).
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
RBAC = ROOT / "deploy" / "common" / "rbac.yaml"
CLIENT_VERBS = {
    "get": "get",
    "list": "list",
    "watch": "watch",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
}
CLIENT_NAMES = {"client", "kube", "_client", "_kube"}
HOLE = "\x00"
#: Not scanned: the local control plane (runs as admin, not as the agent) and the generic client
#: layer, whose paths come from its callers (``Reflector(client, path)`` is scanned there).
GENERIC = {"gateway/kube/client.py", "gateway/kube/reflector.py"}  # an unresolved f-string part

#: Resource segments that are variables, with the values their type allows.
VARIABLE_RESOURCES = {
    ("gateway/pods/resolve/resolver.py", "kind"): typing.get_args(
        __import__("gateway.pods.resolve", fromlist=["Kind"]).Kind
    ),
}


@dataclass(frozen=True, order=True)
class Call:
    group: str
    resource: str
    verb: str
    #: "" for cluster-wide/any namespace, else the fixed namespace in the path ("{}" = variable).
    namespace: str
    where: str


# --------------------------------------------------------------------------- finding calls


class _Resolver:
    def __init__(self, tree: ast.Module) -> None:
        self.constants: dict[str, ast.expr] = {}
        self.methods: dict[tuple[str, str], ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.constants[target.id] = node.value
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    for sub in ast.walk(item):  # self.x = <expr> attributes
                        if (
                            isinstance(sub, ast.Assign)
                            and len(sub.targets) == 1
                            and isinstance(sub.targets[0], ast.Attribute)
                            and _is_self(sub.targets[0].value)
                        ):
                            self.methods.setdefault((node.name, sub.targets[0].attr), sub.value)
                    if isinstance(item, ast.FunctionDef):
                        ret = [s for s in ast.walk(item) if isinstance(s, ast.Return) and s.value]
                        if len(ret) == 1 and ret[0].value is not None:
                            self.methods[(node.name, item.name)] = ret[0].value

    def text(self, expr: ast.expr, cls: str) -> str | None:
        """The path with unresolvable parts as HOLE; None when it is not a path at all."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.JoinedStr):
            parts = []
            for value in expr.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                else:
                    assert isinstance(value, ast.FormattedValue)
                    inner = self.text(value.value, cls)
                    parts.append(inner if inner is not None else HOLE)
            return "".join(parts)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.text(expr.left, cls), self.text(expr.right, cls)
            return None if left is None or right is None else left + right
        if isinstance(expr, ast.Name) and expr.id in self.constants:
            return self.text(self.constants[expr.id], cls)
        if isinstance(expr, ast.Attribute) and _is_self(expr.value):
            body = self.methods.get((cls, expr.attr))
            return self.text(body, cls) if body is not None else None
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and _is_self(expr.func.value)
        ):
            body = self.methods.get((cls, expr.func.attr))
            return self.text(body, cls) if body is not None else None
        return None


def _is_self(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Name) and expr.id == "self"


def _receiver(expr: ast.expr) -> str:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


def _calls_in(path: Path) -> Iterator[tuple[str, str, str, int]]:
    """(verb, path text, enclosing class, line) for each API call in one file."""
    tree = ast.parse(path.read_text(), str(path))
    resolver = _Resolver(tree)
    classes = {
        id(n): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in ast.walk(c)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        cls = classes.get(id(node), "")
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CLIENT_VERBS:
            if _receiver(func.value) not in CLIENT_NAMES:
                continue
            text = resolver.text(node.args[0], cls)
            if text is None:
                pytest.fail(f"{path}:{node.lineno}: cannot resolve the API path of this call")
            yield CLIENT_VERBS[func.attr], text, cls, node.lineno
        elif isinstance(func, ast.Name) and func.id == "Reflector" and len(node.args) >= 2:
            text = resolver.text(node.args[1], cls)
            if text is None:
                pytest.fail(f"{path}:{node.lineno}: cannot resolve the Reflector path")
            yield "list", text, cls, node.lineno
            yield "watch", text, cls, node.lineno


def _parse(rel: str, verb: str, text: str, line: int) -> list[Call]:
    segments = text.strip("/").split("/")
    if segments[0] == "api":
        group, rest = "", segments[2:]
    elif segments[0] == "apis":
        group, rest = segments[1], segments[3:]
    else:
        raise AssertionError(f"{rel}:{line}: not an API path: {text!r}")
    if not rest:
        return []  # discovery (non-resource URL)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace = "{}" if HOLE in rest[1] else rest[1]
        rest = rest[2:]
    resource = rest[0]
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    where = f"{rel}:{line}"
    if HOLE in resource.split("/")[0]:
        values = [v for (f, _), vs in VARIABLE_RESOURCES.items() if f == rel for v in vs]
        assert values, f"{where}: the resource of {text!r} is a variable this test cannot resolve"
        return [Call(group, v, verb, namespace, where) for v in values]
    return [Call(group, resource, verb, namespace, where)]


def code_calls() -> list[Call]:
    calls: list[Call] = []
    for path in sorted(GATEWAY.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("devstack/") or rel in GENERIC:
            continue
        for verb, text, _cls, line in _calls_in(path):
            calls += _parse(rel, verb, text, line)
    return calls


# --------------------------------------------------------------------------- the role


@dataclass(frozen=True)
class Grant:
    group: str
    resource: str
    verb: str
    #: "" for the ClusterRole, else the Role's namespace.
    namespace: str


#: Grants an operator adds for an opt-in feature, in their own file; ``signers`` is not an API
#: call but the authorization check of the approval update.
OPTIONAL = ROOT / "deploy" / "optional" / "csr-self-approve.yaml"
AUTHORIZATION_ONLY = {("certificates.k8s.io", "signers", "approve")}


def role_grants(path: Path = RBAC) -> list[Grant]:
    grants: list[Grant] = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        ns = doc["metadata"].get("namespace", "") if doc["kind"] == "Role" else ""
        for rule in doc.get("rules") or []:
            assert "resourceNames" not in rule or rule["resourceNames"], rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert verb != "*" and resource != "*", f"wildcard in {rule}"
                        grants.append(Grant(group, resource, verb, ns))
    return grants


#: Namespaced calls whose namespace is a setting, and the Role namespace deploy/ sets it to.
SETTING_NAMESPACES = {
    ("gateway/templating/source.py", "configmaps"): "vkgate-system",
}


def _granted(call: Call, grants: list[Grant]) -> Grant | None:
    file = call.where.rsplit(":", 1)[0]
    wanted_ns = call.namespace if call.namespace not in ("", "{}") else ""
    wanted_ns = SETTING_NAMESPACES.get((file, call.resource), wanted_ns)
    for g in grants:
        if (g.group, g.resource, g.verb) != (call.group, call.resource, call.verb):
            continue
        if g.namespace == "" or g.namespace == wanted_ns:
            return g
    return None


# --------------------------------------------------------------------------- the tests


def test_the_scan_finds_the_calls_we_know_about() -> None:
    found = {(c.group, c.resource, c.verb) for c in code_calls()}
    # A few anchors, so a broken scanner cannot pass on an empty list.
    for anchor in [
        ("", "pods", "watch"),
        ("", "pods/status", "patch"),
        ("", "nodes/status", "patch"),
        ("", "secrets", "get"),
        ("", "serviceaccounts/token", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("authentication.k8s.io", "tokenreviews", "create"),
    ]:
        assert anchor in found, f"scanner lost {anchor}; found {sorted(found)}"


def test_every_api_call_in_the_code_is_granted() -> None:
    grants = role_grants() + role_grants(OPTIONAL)
    missing = [c for c in code_calls() if _granted(c, grants) is None]
    assert not missing, "deploy/common/rbac.yaml lacks:\n" + "\n".join(map(str, missing))


def test_every_grant_is_used_by_the_code() -> None:
    calls = code_calls()
    grants = role_grants() + role_grants(OPTIONAL)
    used = {_granted(c, grants) for c in calls}
    unused = [
        g
        for g in grants
        if g not in used and (g.group, g.resource, g.verb) not in AUTHORIZATION_ONLY
    ]
    assert not unused, "deploy/common/rbac.yaml grants what no code calls:\n" + "\n".join(
        map(str, unused)
    )


def test_secrets_and_configmaps_are_never_listed_or_watched_cluster_wide() -> None:
    wide = [
        g
        for g in role_grants()
        if g.namespace == "" and g.resource in ("secrets", "configmaps") and g.verb != "get"
    ]
    assert not wide, wide
