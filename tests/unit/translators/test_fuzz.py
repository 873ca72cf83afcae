"""Fuzzing: generated pods through every translator's render path, and mutated backend
states through every status mapper and on into PodStatus.  The only exceptions allowed out
are the translator error tree (``TranslatorError``: the pod gets a reason and an Event); any
other exception is a crash of a sync or a reconcile.  Example counts are bounded so the
tier stays fast in CI (docs/design/template-safety.md)."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as _dt
import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.pods.status.rules import from_workload
from gateway.templating.offline import parse_inputs, resolve
from translators.base import Features, TranslatorError
from translators.batch.status import group_tasks
from translators.batch.status import workload_state as batch_state
from translators.batch.translator import BatchTranslator
from translators.nomad.config import NomadConfig
from translators.nomad.jobs import render_job
from translators.nomad.placements import placement_from
from translators.nomad.status import JobView
from translators.nomad.status import workload_state as nomad_state
from translators.nomad.translator import NomadTranslator
from translators.render.engine import Renderer
from translators.render.pool import RenderPool
from translators.simulated import SimulatedTranslator
from translators.zun.client import FEATURES, feature_flags
from translators.zun.config import load_config as zun_config
from translators.zun.config import parse_microversion
from translators.zun.spec import SpecBuilder
from translators.zun.status import capsule_workload, container_workload
from translators.zun.translator import zun_features

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
NOW = _dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=_dt.UTC)
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)

# --------------------------------------------------------------------------- pods

names = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
text = st.text(max_size=20)
quantity = st.one_of(
    st.sampled_from(["100m", "1", "0.5", "2Gi", "300Mi", "1e3", "0", "-1", "1.5Ki", "x", ""]),
    st.integers(-5, 10**6),
    text,
)
env_var = st.one_of(
    st.fixed_dictionaries(
        {"name": st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)}, optional={"value": text}
    ),
    st.fixed_dictionaries(
        {
            "name": st.from_regex(r"[A-Z_]{1,8}", fullmatch=True),
            "valueFrom": st.fixed_dictionaries(
                {"secretKeyRef": st.fixed_dictionaries({"name": names, "key": names})}
            ),
        }
    ),
)
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]),
            quantity,
            max_size=3,
        ),
        "limits": st.dictionaries(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity, max_size=3
        ),
    },
)
container = st.fixed_dictionaries(
    {"name": names, "image": st.one_of(st.just("busybox:1.36"), text)},
    optional={
        "command": st.lists(text, max_size=3),
        "args": st.lists(text, max_size=3),
        "env": st.lists(env_var, max_size=3),
        "resources": resources,
        "workingDir": text,
        "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never", "Sometimes"]),
        "ports": st.lists(
            st.fixed_dictionaries(
                {"containerPort": st.integers(-1, 70000)},
                optional={"protocol": st.sampled_from(["TCP", "UDP", "SCTP", "x"]), "name": names},
            ),
            max_size=2,
        ),
        "restartPolicy": st.sampled_from(["Always", "x"]),
    },
)
annotation = st.dictionaries(
    st.sampled_from(
        [
            "vkgate.io/template",
            "vkgate.io/nomad-priority",
            "vkgate.io/nomad-datacenters",
            "vkgate.io/nomad-node-pool",
            "vkgate.io/nomad-namespace",
            "vkgate.io/nomad-region",
            "vkgate.io/zun-nets",
            "vkgate.io/zun-security-groups",
            "vkgate.io/zun-availability-zone",
            "vkgate.io/batch-pool",
            "vkgate.io/simulated-run-seconds",
            "vkgate.io/simulated-exit-code",
            "example.com/other",
        ]
    ),
    st.one_of(text, st.sampled_from(["1", "100", "0", "default", "dc1", "nomad/job.j2", "*"])),
    max_size=4,
)
volume = st.one_of(
    st.fixed_dictionaries({"name": names, "emptyDir": st.just({})}),
    st.fixed_dictionaries({"name": names, "secret": st.fixed_dictionaries({"secretName": names})}),
    st.fixed_dictionaries({"name": names, "hostPath": st.fixed_dictionaries({"path": text})}),
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    containers = draw(st.lists(container, min_size=1, max_size=3, unique_by=lambda c: c["name"]))
    spec: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": draw(st.sampled_from(["Always", "OnFailure", "Never"])),
    }
    optional = {
        "initContainers": st.lists(container, max_size=2, unique_by=lambda c: c["name"]),
        "volumes": st.lists(volume, max_size=2, unique_by=lambda v: v["name"]),
        "activeDeadlineSeconds": st.integers(-1, 10**9),
        "nodeSelector": st.dictionaries(
            st.sampled_from(["kubernetes.io/arch", "topology.kubernetes.io/zone", "x/y"]),
            text,
            max_size=2,
        ),
        "hostname": text,
        "imagePullSecrets": st.lists(st.fixed_dictionaries({"name": names}), max_size=2),
        "terminationGracePeriodSeconds": st.integers(-1, 10**6),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": draw(names),
            "namespace": draw(names),
            "uid": "0b6c0003-aaaa-bbbb-cccc-"
            + draw(st.from_regex(r"[0-9a-f]{12}", fullmatch=True)),
            "annotations": draw(annotation),
            "labels": draw(st.dictionaries(names, names, max_size=2)),
        },
        "spec": spec,
    }


def resolved(pod: dict[str, Any], features: Features) -> Any:
    """The pod as the agent resolves it for a backend with ``features``; None when the agent
    refuses it (admission, env or mount errors) — that, too, is saying why."""
    inputs = parse_inputs(yaml.safe_dump(pod), source="fuzz")
    return resolve(inputs, node_name="vk-fuzz", features=features).pod


#: registry_auth "job": a pod with imagePullSecrets renders (refused by default) and is fuzzed too
NOMAD = NomadConfig.from_settings({"datacenters": ["dc1"], "registry_auth": "job"}, environ={})
RENDERER = Renderer()


@FUZZ
@given(pods())
def test_nomad_renders_any_pod_or_says_why(pod: dict[str, Any]) -> None:
    rpod = resolved(pod, NomadTranslator.features)
    if rpod is None:
        return
    try:
        job = render_job(rpod, renderer=RENDERER, cfg=NOMAD, settings={}, factor=2000.0)
    except TranslatorError:
        return
    json.dumps(job)


@FUZZ
@given(pods())
def test_the_render_workers_render_any_pod_as_the_agent_does(pod: dict[str, Any]) -> None:
    """The agent renders in worker processes (translators/render/pool.py): whatever a pod
    holds crosses the pipe and comes back the same job, or the same error."""
    rpod = resolved(pod, NomadTranslator.features)
    if rpod is None:
        return
    outcomes = []
    for renderer in (RENDERER, _pooled()):
        try:
            outcomes.append(
                render_job(rpod, renderer=renderer, cfg=NOMAD, settings={}, factor=2000.0)
            )
        except TranslatorError as exc:
            outcomes.append((type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]


@functools.cache
def _pooled() -> Renderer:
    return Renderer(pool=RenderPool(workers=1))


ZUN_SETTINGS: dict[str, Any] = {"auth_url": "https://keystone.example:5000/v3"}


@FUZZ
@given(pods(), st.sampled_from(["1.12", "1.34", "1.40"]))
def test_zun_renders_any_pod_or_says_why(pod: dict[str, Any], microversion: str) -> None:
    builder = SpecBuilder.from_config(zun_config({}), renderer=RENDERER, settings={})
    version = parse_microversion(microversion)
    flags = feature_flags(version)
    rpod = resolved(pod, zun_features(zun_config({}), lambda f: version >= FEATURES[f][0]))
    if rpod is None:
        return
    try:
        spec = builder.render(rpod, flags)
    except TranslatorError:
        return
    json.dumps(spec.body)


BATCH = BatchTranslator(
    None,
    environ={},
    node_name="vk-fuzz",
    endpoint="https://acct.westeurope.batch.azure.com",
    account_name="acct",
    account_key=base64.b64encode(b"fuzz-key").decode(),
    pool_id="pool-1",
)


@FUZZ
@given(pods())
def test_batch_renders_any_pod_or_says_why(pod: dict[str, Any]) -> None:
    from translators.batch.capacity import PoolInfo

    BATCH.nodes.pool = PoolInfo(
        id="pool-1", vm_size="standard_d4s_v3", slots_per_node=4, container_type="dockerCompatible"
    )
    rpod = resolved(pod, BatchTranslator.features)
    if rpod is None:
        return
    try:
        body = BATCH.render_spec(rpod)
    except TranslatorError:
        return
    json.dumps(body)


@FUZZ
@given(pods())
def test_simulated_runs_any_pod_or_says_why(pod: dict[str, Any]) -> None:
    async def scenario() -> None:
        t = SimulatedTranslator(start_delay=0.0)
        rpod = resolved(pod, SimulatedTranslator.features)
        if rpod is None:
            return
        try:
            await t.create(rpod)
        except TranslatorError:
            return
        assert [s.ref.uid for s in await t.list()] == [pod["metadata"]["uid"]]

    asyncio.run(scenario())


# --------------------------------------------------------------------------- backend states


def _pool(cases: list[Any]) -> dict[str, list[Any]]:
    """Every scalar value each key has in the golden cases (ClientStatus: running, lost, …)."""
    pool: dict[str, list[Any]] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif node not in pool.setdefault(key, []):
            pool[key].append(node)

    walk(cases, "")
    return pool


def _scalar_like(draw: st.DrawFn, value: Any, choices: list[Any]) -> Any:
    """A new value of the same JSON type: one the key has elsewhere, or an arbitrary one."""
    same = [c for c in choices if type(c) is type(value)]
    if same and draw(st.booleans()):
        return draw(st.sampled_from(same))
    if isinstance(value, bool):
        return draw(st.booleans())
    if isinstance(value, int):
        return draw(st.integers(-(2**63), 2**63))
    if isinstance(value, float):
        return draw(st.floats(allow_nan=False, allow_infinity=False))
    if isinstance(value, str):
        return draw(st.one_of(text, st.just("")))
    return value


def _spots(node: Any, name: str = "") -> list[tuple[Any, Any, str]]:
    """(container, key, field name) of every value in ``node``, depth first."""
    out: list[tuple[Any, Any, str]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in list(items):
        label = str(key) if isinstance(node, dict) else name
        out.append((node, key, label))
        if isinstance(child, dict | list):
            out.extend(_spots(child, label))
    return out


#: Identity fields every object of these APIs carries; never removed.
IDS = frozenset({"ID", "id", "uuid", "JobID", "Name", "name"})


@st.composite
def mutated(draw: st.DrawFn, doc: Any, pool: dict[str, list[Any]]) -> Any:
    """``doc`` (a real backend answer) with up to 8 changes that keep the JSON types the API
    documents: a scalar gets another value of its type (often one the same key has in another
    case, so states combine), an object loses a key (APIs omit fields), a list loses or
    repeats an item.  Type confusion (an object where the API documents a string) is left
    out: the backends' APIs are typed, and the clients reject non-JSON answers."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 8))):
        spots = _spots({k: v for k, v in doc.items() if k != "pod"})  # the pod: API-validated
        if not spots:
            break
        parent, key, label = draw(st.sampled_from(spots))
        value = parent[key]
        action = draw(st.integers(0, 2))
        if isinstance(parent, dict) and action == 0 and parent is not doc and label not in IDS:
            del parent[key]
        elif isinstance(parent, list) and action == 0:
            parent.append(copy.deepcopy(value)) if draw(st.booleans()) else parent.pop(key)
        elif not isinstance(value, dict | list):
            parent[key] = _scalar_like(draw, value, pool.get(label, []))
    return doc


def _cases(folder: Path, pattern: str) -> list[Any]:
    found = sorted(folder.glob(pattern))
    assert found, f"no golden cases in {folder}/{pattern}"
    return [
        json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
        for p in found
    ]


NOMAD_CASES = _cases(GOLDEN / "nomad" / "states", "*.nomad.json")
ZUN_CASES = _cases(GOLDEN / "zun" / "states", "*.yaml")
BATCH_CASES = _cases(GOLDEN / "batch" / "states", "*.batch.json")
NOMAD_POOL, ZUN_POOL, BATCH_POOL = _pool(NOMAD_CASES), _pool(ZUN_CASES), _pool(BATCH_CASES)
STATES = settings(FUZZ, max_examples=int(os.environ.get("VKGATE_FUZZ_STATES", "150")))


def _to_pod_status(pod: Any, state: Any, backend: str) -> None:
    if state is not None:
        from_workload(pod, state, now=NOW, host_ip="10.0.0.9", backend=backend)


@STATES
@given(st.sampled_from(NOMAD_CASES).flatmap(lambda case: mutated(case, NOMAD_POOL)))
def test_nomad_status_maps_any_backend_state(doc: Any) -> None:
    try:
        view = JobView.from_job(doc["job"])
        for i, alloc in enumerate(doc.get("allocations", [])):
            view.allocs[str(alloc.get("ID", i))] = alloc
        view.placement = placement_from(doc.get("evaluations", []))
        state = nomad_state(view, node_ips=doc.get("node_ips", {}))
    except TranslatorError:
        return
    _to_pod_status(doc["pod"], state, "nomad")


@STATES
@given(st.sampled_from(ZUN_CASES).flatmap(lambda case: mutated(case, ZUN_POOL)))
def test_zun_status_maps_any_backend_state(case: Any) -> None:
    try:
        if "container" in case:
            state = container_workload(case["container"], restart_count=0)
        else:
            state = capsule_workload(case["capsule"], restart_counts={})
    except TranslatorError:
        return
    _to_pod_status({"spec": {"containers": [{"name": "app"}]}}, state, "zun")


@STATES
@given(st.sampled_from(BATCH_CASES).flatmap(lambda case: mutated(case, BATCH_POOL)))
def test_batch_status_maps_any_backend_state(doc: Any) -> None:
    try:
        for group in group_tasks(doc.get("tasks", [])).values():
            state = batch_state(
                group, job_id=str(doc.get("job_id")), node_name="vk-golden", ip_of=lambda n: ""
            )
            _to_pod_status(doc["pod"], state, "batch")
    except TranslatorError:
        return
