"""The ACL policy vkgate ships is exactly what its Nomad calls need (translators/nomad/acl.py).

The calls are read from the code (every ``client.call/get/blocking_get/stream/url`` in
``translators/nomad``), each is looked up in the endpoint table, and the table's needs are
compared both ways with deploy/nomad/vkgate-policy.hcl: a call whose need is not granted fails,
and so does a grant that no call needs (dropping it would leave every need met).  The guide
shows the same file verbatim.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from translators.base import BackendAuthError, BackendNotFound, BackendUnavailable
from translators.nomad.acl import (
    ENDPOINTS,
    HOST_VOLUMES,
    VARIABLES_PATH,
    Endpoint,
    Need,
    Refusals,
    UnlistedEndpoint,
    endpoint_for,
)
from translators.nomad.client import NomadClient
from translators.nomad.config import NomadConfig

REPO = Path(__file__).resolve().parents[4]
POLICY = REPO / "deploy" / "nomad" / "vkgate-policy.hcl"
GUIDE = REPO / "docs" / "backends" / "nomad.md"
CODE = REPO / "translators" / "nomad"
CLIENT_METHODS = {"call": None, "get": "GET", "blocking_get": "GET", "stream": "GET", "url": "GET"}


# --------------------------------------------------------------------------- a small HCL reader


@dataclass
class Block:
    kind: str
    labels: list[str]
    attrs: dict[str, str | list[str]] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)


_TOKEN = re.compile(
    r'(?P<skip>\s+|#[^\n]*|//[^\n]*|/\*.*?\*/)|(?P<str>"(?:[^"\\]|\\.)*")'
    r"|(?P<ident>[A-Za-z_][\w-]*)|(?P<punct>[{}\[\]=,])",
    re.S,
)


def _tokens(text: str) -> Iterator[tuple[str, str]]:
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected {text[pos : pos + 20]!r} at {pos}")
        pos = m.end()
        if m.lastgroup != "skip":
            value = m.group()
            yield (m.lastgroup or "", value[1:-1] if m.lastgroup == "str" else value)


def parse_hcl(text: str) -> Block:
    """The subset ACL policies use: blocks with string labels, ``key = "string"`` and
    ``key = ["list", "of", "strings"]`` (comments and trailing commas allowed)."""
    toks = list(_tokens(text))
    pos = 0

    def take(kind: str | None = None, value: str | None = None) -> str:
        nonlocal pos
        k, v = toks[pos]
        if (kind and k != kind) or (value and v != value):
            raise ValueError(f"expected {value or kind}, got {v!r}")
        pos += 1
        return v

    def body(block: Block, closing: str | None) -> Block:
        nonlocal pos
        while pos < len(toks) and toks[pos][1] != closing:
            name = take("ident")
            if toks[pos][1] == "=":
                take(value="=")
                if toks[pos][1] == "[":
                    take(value="[")
                    items: list[str] = []
                    while toks[pos][1] != "]":
                        items.append(take("str"))
                        if toks[pos][1] == ",":
                            take(value=",")
                    take(value="]")
                    block.attrs[name] = items
                else:
                    block.attrs[name] = take("str")
                continue
            labels = []
            while toks[pos][0] == "str":
                labels.append(take("str"))
            take(value="{")
            block.blocks.append(body(Block(name, labels), "}"))
            take(value="}")
        return block

    return body(Block("", []), None)


@dataclass(frozen=True)
class Grants:
    namespaces: dict[str, frozenset[str]]
    node: str  # "" | "read" | "write"
    #: namespace → variables path → capabilities
    variables: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    #: host_volume label → policy ("read" | "write")
    host_volumes: dict[str, str] = field(default_factory=dict)

    def has(self, need: Need, namespace: str) -> bool:
        if need.scope == "node":
            return self.node in ("read", "write")
        if need.scope == "host_volume":
            # "write" includes mount-readonly (Nomad's policy expansion)
            policy = self.host_volumes.get(HOST_VOLUMES, "")
            return policy == "write" or policy in (need.capability, *need.alternatives)
        if need.scope == "variables":
            caps = self.variables.get(namespace, {}).get(VARIABLES_PATH, frozenset())
        else:
            caps = self.namespaces.get(namespace, frozenset())
        return any(c in caps for c in (need.capability, *need.alternatives))


def _variables_of(block: Block) -> dict[str, frozenset[str]]:
    assert not block.attrs and not block.labels, "variables { path … { … } } only"
    paths: dict[str, frozenset[str]] = {}
    for path in block.blocks:
        assert path.kind == "path" and set(path.attrs) == {"capabilities"}, path
        caps = path.attrs["capabilities"]
        assert isinstance(caps, list)
        paths[path.labels[0]] = frozenset(caps)
    return paths


def grants_of(policy: Block) -> Grants:
    namespaces: dict[str, frozenset[str]] = {}
    variables: dict[str, dict[str, frozenset[str]]] = {}
    host_volumes: dict[str, str] = {}
    node = ""
    for block in policy.blocks:
        if block.kind == "namespace":
            assert set(block.attrs) == {"capabilities"}, "explicit capabilities only"
            caps = block.attrs["capabilities"]
            assert isinstance(caps, list)
            namespaces[block.labels[0]] = frozenset(caps)
            for inner in block.blocks:
                assert inner.kind == "variables", f"the policy grants {inner.kind!r}"
                variables[block.labels[0]] = _variables_of(inner)
        elif block.kind == "node":
            node = str(block.attrs["policy"])
        elif block.kind == "host_volume":
            assert set(block.attrs) == {"policy"} and not block.blocks, "a policy only"
            host_volumes[block.labels[0]] = str(block.attrs["policy"])
        else:
            raise AssertionError(f"the policy grants {block.kind!r}, which no call needs")
    return Grants(namespaces, node, variables, host_volumes)


def test_the_reader_reads_what_nomad_reads() -> None:
    policy = parse_hcl(
        '# c\nnamespace "a" {\n  capabilities = ["x", # y\n "z",]\n}\nnode { policy = "read" }\n'
    )
    assert grants_of(policy) == Grants({"a": frozenset({"x", "z"})}, "read")
    policy = parse_hcl(
        'namespace "a" {\n  capabilities = []\n  variables {\n    path "nomad/jobs/*" {\n'
        '      capabilities = ["write"]\n    }\n  }\n}\n'
    )
    grants = grants_of(policy)
    assert grants.has(Need("write", scope="variables"), "a")
    assert not grants.has(Need("destroy", scope="variables"), "a")
    assert not grants.has(Need("write"), "a")
    assert not grants.has(Need("write", scope="host_volume"), "a")
    grants = grants_of(parse_hcl('host_volume "*" {\n  policy = "read"\n}\n'))
    assert grants == Grants({}, "", {}, {"*": "read"})
    assert grants.has(Need("read", scope="host_volume"), "a")
    assert not grants.has(Need("write", scope="host_volume"), "a")
    assert grants_of(parse_hcl('host_volume "*" { policy = "write" }')).has(
        Need("read", scope="host_volume"), "a"
    )
    # a narrowed name is not "any host volume" (a pod's claim may name any)
    narrowed = grants_of(parse_hcl('host_volume "data-*" { policy = "write" }'))
    assert not narrowed.has(Need("write", scope="host_volume"), "a")


# --------------------------------------------------------------------------- calls in the code


def _path_of(node: ast.expr, strings: Mapping[str, ast.expr]) -> str | None:
    if isinstance(node, ast.Name) and node.id in strings:
        node = strings[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        # an interpolated piece stands for one path segment
        return "".join(str(v.value) if isinstance(v, ast.Constant) else ":x" for v in node.values)
    return None


def _is_client(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "client") or (
        isinstance(node, ast.Attribute) and node.attr == "client"
    )


def calls_in_code() -> dict[tuple[str, str], list[str]]:
    """(method, path with ``:x`` for interpolations) → where, for every Nomad call."""
    found: dict[tuple[str, str], list[str]] = {}
    for source in sorted(CODE.glob("*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            strings = {
                t.id: a.value
                for a in ast.walk(fn)
                if isinstance(a, ast.Assign)
                for t in a.targets
                if isinstance(t, ast.Name) and isinstance(a.value, ast.Constant | ast.JoinedStr)
            }
            for call in ast.walk(fn):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in CLIENT_METHODS
                    and _is_client(call.func.value)
                ):
                    continue
                where = f"{source.name}:{call.lineno}"
                method = CLIENT_METHODS[call.func.attr]
                args = list(call.args)
                if method is None:
                    first = args.pop(0)
                    assert isinstance(first, ast.Constant), f"{where}: method must be literal"
                    method = str(first.value)
                path = _path_of(args[0], strings)
                assert path is not None, f"{where}: the path must be a literal or an f-string"
                found.setdefault((method, path), []).append(where)
    return {k: sorted(set(v)) for k, v in found.items()}  # nested functions are seen twice


def test_every_nomad_call_in_the_code_is_in_the_endpoint_table() -> None:
    calls = calls_in_code()
    assert len(calls) >= 15  # the scan sees the calls (a broken scan finds none)
    missing = []
    used: set[Endpoint] = set()
    for (method, path), where in calls.items():
        try:
            used.add(endpoint_for(method, path))
        except UnlistedEndpoint:
            missing.append(f"{method} {path} ({', '.join(where)})")
    assert not missing, f"calls without an entry in translators/nomad/acl.py: {missing}"
    stale = [f"{e.method} {e.path}" for e in ENDPOINTS if e not in used]
    assert not stale, f"entries no code calls (remove them): {stale}"


def test_the_shipped_policy_grants_what_the_calls_need_and_nothing_more() -> None:
    grants = grants_of(parse_hcl(POLICY.read_text()))
    ns = NomadConfig().namespace
    assert set(grants.namespaces) == {ns}, "the policy is written for the default namespace"
    needs = [(e, n) for e in ENDPOINTS for n in e.needs]
    ungranted = [
        f"{e.method} {e.path}: {n.describe(ns)}" for e, n in needs if not grants.has(n, ns)
    ]
    assert not ungranted, f"calls the policy does not allow: {ungranted}"
    unused = []
    for cap in grants.namespaces[ns]:
        fewer = Grants(
            {ns: grants.namespaces[ns] - {cap}}, grants.node, grants.variables, grants.host_volumes
        )
        if all(fewer.has(n, ns) for _, n in needs):
            unused.append(cap)
    for path, caps in grants.variables.get(ns, {}).items():
        for cap in caps:
            less = {**grants.variables[ns], path: caps - {cap}}
            fewer = Grants(grants.namespaces, grants.node, {ns: less}, grants.host_volumes)
            if all(fewer.has(n, ns) for _, n in needs):
                unused.append(f"variables {path} {cap}")
    if grants.node and all(n.scope != "node" for _, n in needs):
        unused.append(f"node {grants.node}")
    for label, policy in grants.host_volumes.items():
        dropped = {k: v for k, v in grants.host_volumes.items() if k != label}
        weaker = [dropped] + ([{**dropped, label: "read"}] if policy == "write" else [])
        for volumes in weaker:  # without the block, or "write" lowered to "read"
            fewer = Grants(grants.namespaces, grants.node, grants.variables, volumes)
            if all(fewer.has(n, ns) for _, n in needs):
                unused.append(f'host_volume "{label}" {policy}')
                break
    assert not unused, f"grants no call needs: {unused}"


def test_a_jobs_register_names_its_volume_grants() -> None:
    """Nomad 1.6's Job.Register checks submit-job, then each group volume: host_volume write
    (mount-readwrite) for a host volume, csi-mount-volume for a CSI one."""
    assert endpoint_for("POST", "/jobs").refusal("k8s") == (
        'needs namespace "k8s" capability submit-job, and host_volume "*" policy write for a'
        ' job that mounts a host volume, and namespace "k8s" capability csi-mount-volume for'
        " a job that claims a CSI volume"
    )
    assert endpoint_for("POST", "/job/x/plan").refusal("k8s") == (
        'needs namespace "k8s" capability submit-job'
    )


def test_the_guide_shows_the_policy_file_verbatim() -> None:
    blocks = re.findall(r"^```hcl\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)
    assert POLICY.read_text() in blocks


# --------------------------------------------------------------------------- the client uses it


def _client(handler: httpx.MockTransport, **settings: object) -> NomadClient:
    return NomadClient(NomadConfig.from_settings(dict(settings), environ={}), transport=handler)


async def test_a_call_missing_from_the_table_is_not_sent() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    client = _client(httpx.MockTransport(handler))
    with pytest.raises(UnlistedEndpoint, match=r"GET /v1/job/x/versions"):
        await client.get("/job/x/versions")
    await client.aclose()
    assert sent == []


async def test_a_refusal_names_the_capability_the_endpoint_needs() -> None:
    client = _client(
        httpx.MockTransport(lambda r: httpx.Response(403, text="Permission denied")),
        namespace="k8s",
    )
    with pytest.raises(BackendAuthError) as err:
        await client.get("/jobs")
    assert str(err.value) == (
        'nomad GET /v1/jobs: 403 Permission denied (needs namespace "k8s" capability list-jobs)'
    )
    with pytest.raises(BackendAuthError, match=r'needs node policy "read"\)$'):
        await client.get("/nodes", namespace="")
    await client.aclose()


async def test_a_refusal_is_not_retried() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(403, text="Permission denied")

    client = _client(httpx.MockTransport(handler), retry_backoff=[0.1, 0.1, 0.1])
    with pytest.raises(BackendAuthError):
        await client.get("/allocations")
    await client.aclose()
    assert len(sent) == 1


async def test_the_event_streams_refusal_is_a_500_but_still_a_refusal() -> None:
    """Nomad 1.6 answers a stream subscription its token may not read with 500 and the RPC's
    error text (command/agent/event_endpoint.go), not 403."""
    client = _client(httpx.MockTransport(lambda r: httpx.Response(500, text="Permission denied")))
    with pytest.raises(BackendAuthError, match=r"capability read-job\)$"):
        async with client.stream("/event/stream", params={"topic": ["Job"]}):
            pass
    await client.aclose()


async def test_a_refusal_is_remembered_until_the_same_grant_works() -> None:
    answers = iter([403, 404, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        return httpx.Response(status, text="Permission denied" if status == 403 else "{}")

    client = _client(httpx.MockTransport(handler))
    with pytest.raises(BackendAuthError):
        await client.call("DELETE", "/job/web")
    assert "submit-job" in (client.refusals.get("submit-job", "default") or "")
    with pytest.raises(BackendNotFound):
        await client.get("/job/web")  # read-job: says nothing about submit-job
    assert client.refusals.get("submit-job", "default") is not None
    await client.call("POST", "/jobs", body={"Job": {}})
    assert client.refusals.get("submit-job", "default") is None
    await client.aclose()


async def test_an_unknown_token_is_named_as_such() -> None:
    client = _client(httpx.MockTransport(lambda r: httpx.Response(403, text="ACL token not found")))
    with pytest.raises(BackendAuthError, match=r"NOMAD_TOKEN, is unknown"):
        await client.get("/jobs")
    await client.aclose()


async def test_other_500s_stay_transient() -> None:
    client = _client(
        httpx.MockTransport(lambda r: httpx.Response(500, text="rpc error: no leader")),
        retry_backoff=[],
    )
    with pytest.raises(BackendUnavailable):
        await client.get("/jobs")
    await client.aclose()


def test_a_registers_refusal_stands_for_submit_job_and_a_success_clears_only_it() -> None:
    refusals = Refusals()
    register = endpoint_for("POST", "/jobs")
    refusals.refused(register, "default", "refused")
    assert refusals.get("submit-job", "default") == "refused"
    refusals.refused(endpoint_for("GET", "/client/allocation/a/exec"), "default", "exec")
    assert refusals.get("alloc-exec", "default") is None  # either of its two
    refusals.refused(endpoint_for("DELETE", "/job/web"), "default", "x")
    refusals.refused(endpoint_for("POST", "/job/web/plan"), "k8s", "y")
    refusals.allowed(register, "default")  # a job without volumes says nothing of them
    assert refusals.get("submit-job", "default") is None
    assert refusals.get("submit-job", "k8s") == "y"
