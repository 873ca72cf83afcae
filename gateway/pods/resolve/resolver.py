"""Fetch what a pod references and turn the pod into a ``ResolvedPod`` (the only I/O of
resolution; the rules themselves are the pure functions in ``env``/``volumes``/``features``).

**ConfigMaps and Secrets are read by name, only for the pods that reference them** — no
cluster-wide Secret watch, so the same code works under NodeRestriction, where a node may only
``get`` objects its own pods reference.  ``RefCache`` keeps what was read and, while at least one
pod references an object, re-reads it every ``refresh_interval`` (default 30 s; the kubelet's
"cache" change-detection strategy): a changed ``resourceVersion`` — or an object that appeared
or vanished — re-queues every pod that references it.  Why polling and not a watch per object:
every watch is a long-lived HTTP/1.1 connection here (no HTTP/2 multiplexing), and hundreds of
them would exhaust the client's connection pool; a GET per referenced object per interval is
cheap and bounded.  A pod stuck on a missing mandatory key starts at most one interval after
the key appears, or sooner at its own backoff retry (a cached "not found" is re-read after 5 s).

**imagePullSecrets** are read the same way (by name, through ``RefCache``) but are not
tracked for change detection: credentials matter when a workload is created, and a rotated
pull secret must not restart a running one.  The rules are in ``gateway.pods.resolve.pullsecrets``; a
missing pull secret (404) is a Warning event, an unreadable one holds the pod and retries.

Services (for service link variables) are listed per namespace and cached for the same
interval.  ``serviceAccountToken`` projections are TokenRequests bound to the pod, each kept
until 80 % of its lifetime and then requested again (the kubelet's refresh), which re-queues
the pod: its workload's token file is updated in place where the backend can
(``Features.updates_files_in_place``: Nomad).  The team is
the operator's decision (gateway.inputs.teamrule): the config's namespace → team map
(``templates.teams``), else the namespace label ``vkgate.io/team`` (a live cache of the labelled
namespaces, loaded before any pod is synced: gateway.inputs.teams) where
``templates.team_label_namespaces`` lets the namespace choose; ``ResolvedPod.team_source`` says
which.  A label the rule ignores is a Warning Event ``TeamLabelIgnored`` on the pod naming the
label and the setting (docs/design/teams.md).  Every other read here happens
while the pod is synced, so it has no initial load to wait for; one that fails holds the pod
(``ReadError``) instead of reading as "absent" (docs/design/startup.md).

**One resolver, two adapters.**  ``Resolver`` reads the cluster only through the ``Lookups``
port: ``RefCache`` is the live adapter (the API server, cached), ``gateway.templating.offline.FileLookups``
the offline one (objects from a YAML file).  ``vkgate render`` therefore resolves a pod with
exactly the agent's rules — admission, env and volume errors, the pod IP placeholder, the team.

**status.podIP before the backend assigned one** (docs/design/kubelet-contract.md, "Environment
resolution"; Go VK fails these fieldRefs):
the pod's own ``status.podIP`` when already known (a re-create), else the translator's
``Features.pod_ip_placeholder`` — a token the backend replaces with the real address at run
time, so it also works inside ``$(VAR)`` expansions and command/args — else the node
InternalIP, which is the right answer for host-network backends (Nomad raw_exec/docker host
mode, Batch).  ``status.hostIP(s)`` is always the node InternalIP.

Internal to ``gateway.pods.resolve``, which exports its public names.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import json
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gateway.inputs.teamrule import TeamDecision, TeamRule
from gateway.inputs.teams import NamespaceTeams
from gateway.kube.client import KubeClient
from gateway.kube.errors import ApiError, NotFound
from gateway.pods.events import Event
from gateway.pods.keys import PodKey
from gateway.pods.resolution import Resolution, Unsupported
from gateway.pods.resolve import admission as admod
from gateway.pods.resolve import claims as claimmod
from gateway.pods.resolve import env as envmod
from gateway.pods.resolve import features as featmod
from gateway.pods.resolve import pullsecrets as pullmod
from gateway.pods.resolve import volumes as volmod
from gateway.pods.resolve.env import EnvSources, Lookup, ReadError
from translators.base import (
    Features,
    ResolvedContainer,
    ResolvedPod,
)
from translators.render.engine import TEAM_LABEL
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.kubetypes import CONTAINER_GROUPS, Pod

log = logging.getLogger("gateway.pods.resolve")

Kind = Literal["configmaps", "secrets", "persistentvolumeclaims"]
#: The cache key kind of a PersistentVolume (cluster-scoped: namespace "").
PV_KIND = "persistentvolumes"
RefKey = tuple[str, str, str]  # (kind, namespace, name)
#: A "not found" is re-read after this long when a pod sync asks again (its retry backoff),
#: so a pod waiting for a ConfigMap does not have to wait for the next refresh.
MISS_TTL = 5.0


@dataclass
class _Entry:
    value: Lookup
    rv: str
    fetched: float


def _rv(obj: Lookup) -> str:
    if isinstance(obj, Mapping):
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return "" if obj is None else "error"


class Lookups(Protocol):
    """What resolution reads from the cluster (the port; ``RefCache`` is the live adapter)."""

    async def get(self, kind: Kind, namespace: str, name: str) -> Lookup: ...

    async def services(self, namespace: str) -> list[dict[str, Any]] | ReadError: ...

    async def team(self, namespace: str) -> str: ...

    async def token(self, pod: Mapping[str, Any], key: volmod.TokenKey) -> str | ReadError: ...

    async def persistent_volume(self, name: str) -> Lookup: ...


#: A projected service-account token is requested again at this fraction of its lifetime, as
#: the kubelet's token manager does (docs/design/secrets.md).
TOKEN_REFRESH_FRACTION = 0.8


@dataclass
class _Token:
    value: str
    pod_key: str
    #: monotonic time at which it is requested again
    refresh_at: float


def token_lifetime(status: Mapping[str, Any], *, now: _dt.datetime, requested: int) -> float:
    """Seconds the issued token lives: its ``expirationTimestamp`` (the API server may shorten
    or extend the request) from now, else the requested ``expirationSeconds``."""
    stamp = str(status.get("expirationTimestamp") or "")
    try:
        expires = _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return float(requested)
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=_dt.UTC)
    return max(0.0, (expires - now).total_seconds())


class RefCache:
    """ConfigMaps/Secrets by name, with per-pod reference tracking and periodic re-reads; the
    pods' projected service-account tokens, each kept until 80 % of its lifetime has passed
    (``TOKEN_REFRESH_FRACTION``), when the refresh loop re-queues its pod for a new one."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        clock: Clock | None = None,
        refresh_interval: float = 30.0,
        concurrency: int = 8,
        teams: NamespaceTeams | None = None,
    ) -> None:
        """``teams``: the namespace label cache (None: no team labels are read)."""
        self.kube = kube
        self.teams = teams
        self.clock: Clock = clock or SystemClock()
        self.refresh_interval = refresh_interval
        self._sem = asyncio.Semaphore(concurrency)
        self._cache: dict[RefKey, _Entry] = {}
        self._by_pod: dict[str, set[RefKey]] = {}
        self._services: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._tokens: dict[tuple[str, volmod.TokenKey], _Token] = {}
        #: Counters for tests and metrics.
        self.reads = 0

    # -- objects ---------------------------------------------------------------------------

    async def _read(self, key: RefKey) -> Lookup:
        kind, ns, name = key
        self.reads += 1
        async with self._sem:
            try:
                if kind == PV_KIND:
                    return await self.kube.get(f"/api/v1/persistentvolumes/{name}")
                return await self.kube.get(f"/api/v1/namespaces/{ns}/{kind}/{name}")
            except NotFound:
                return None
            except ApiError as exc:
                return ReadError(str(exc))

    async def get(self, kind: Kind, namespace: str, name: str) -> Lookup:
        return await self._lookup((kind, namespace, name))

    async def persistent_volume(self, name: str) -> Lookup:
        """The PersistentVolume a pod's claim is bound to (gateway/pods/resolve/claims.py)."""
        return await self._lookup((PV_KIND, "", name))

    async def _lookup(self, key: RefKey) -> Lookup:
        entry = self._cache.get(key)
        if entry is not None and (
            entry.value is not None or self.clock.monotonic() - entry.fetched < MISS_TTL
        ):
            return entry.value
        value = await self._read(key)
        if not isinstance(value, ReadError):
            self._cache[key] = _Entry(value, _rv(value), self.clock.monotonic())
        return value

    def track(self, pod_key: str, refs: set[RefKey]) -> None:
        if refs:
            self._by_pod[pod_key] = set(refs)
        else:
            self._by_pod.pop(pod_key, None)

    def untrack(self, pod_key: str) -> None:
        self._by_pod.pop(pod_key, None)
        for key in [k for k, t in self._tokens.items() if t.pod_key == pod_key]:
            del self._tokens[key]

    def tracked(self) -> set[RefKey]:
        return set().union(*self._by_pod.values()) if self._by_pod else set()

    def tokens_due(self) -> set[str]:
        """Pod keys with a token at 80 % of its lifetime: their next resolution gets a new one."""
        now = self.clock.monotonic()
        return {t.pod_key for t in self._tokens.values() if now >= t.refresh_at}

    async def refresh(self) -> set[str]:
        """Re-read every referenced object; returns the pod keys whose references changed or
        whose tokens are due."""
        wanted = self.tracked()
        for key in list(self._cache):
            if key not in wanted:
                del self._cache[key]
        keys = sorted(wanted)
        values = await asyncio.gather(*(self._read(k) for k in keys))
        changed: set[RefKey] = set()
        for key, value in zip(keys, values, strict=True):
            if isinstance(value, ReadError):
                log.debug("re-reading %s/%s/%s failed: %s", *key, value.message)
                continue
            old = self._cache.get(key)
            self._cache[key] = _Entry(value, _rv(value), self.clock.monotonic())
            if old is None or old.rv != _rv(value):
                changed.add(key)
        return {pod for pod, refs in self._by_pod.items() if refs & changed} | self.tokens_due()

    async def run(self, on_change: Callable[[str], None]) -> None:
        """Refresh forever; call ``on_change(pod_key)`` for pods whose references changed."""
        while True:
            await self.clock.sleep(self.refresh_interval)
            try:
                for pod_key in sorted(await self.refresh()):
                    on_change(pod_key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refreshing referenced ConfigMaps/Secrets failed")

    # -- services, teams, tokens -----------------------------------------------------------

    async def services(self, namespace: str) -> list[dict[str, Any]] | ReadError:
        """Services of ``namespace`` plus ``default/kubernetes`` (cached one interval)."""
        now = self.clock.monotonic()
        out: list[dict[str, Any]] = []
        for ns in dict.fromkeys(["default", namespace]):
            cached = self._services.get(ns)
            if cached is not None and now - cached[0] < self.refresh_interval:
                items = cached[1]
            else:
                try:
                    if ns == "default" and namespace != "default":
                        try:
                            items = [
                                await self.kube.get(
                                    "/api/v1/namespaces/default/services/kubernetes"
                                )
                            ]
                        except NotFound:
                            items = []
                    else:
                        listed = await self.kube.list(f"/api/v1/namespaces/{ns}/services")
                        items = list(listed.get("items") or [])
                except ApiError as exc:
                    return ReadError(str(exc))
                for item in items:
                    item.setdefault("metadata", {}).setdefault("namespace", ns)
                self._services[ns] = (now, items)
            out.extend(items)
        return out

    async def team(self, namespace: str) -> str:
        return self.teams.team(namespace) if self.teams is not None else ""

    async def token(self, pod: Mapping[str, Any], key: volmod.TokenKey) -> str | ReadError:
        """The pod's token for ``key``: the one issued before until it is due, else a new
        TokenRequest bound to the pod."""
        audience, seconds, sa = key
        meta = pod.get("metadata") or {}
        cache_key = (str(meta.get("uid", "")), key)
        cached = self._tokens.get(cache_key)
        if cached is not None and self.clock.monotonic() < cached.refresh_at:
            return cached.value
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                },
            },
        }
        try:
            resp = await self.kube.create(
                f"/api/v1/namespaces/{meta.get('namespace', '')}/serviceaccounts/{sa}/token", body
            )
        except ApiError as exc:
            return ReadError(str(exc))
        status = resp.get("status") or {}
        token = str(status.get("token") or "")
        lifetime = token_lifetime(status, now=self.clock.now(), requested=seconds)
        self._tokens[cache_key] = _Token(
            token,
            PodKey.of(pod),
            self.clock.monotonic() + TOKEN_REFRESH_FRACTION * lifetime,
        )
        return token


# --------------------------------------------------------------------------- resolution


def references(pod: Mapping[str, Any]) -> set[RefKey]:
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    cms, secrets = envmod.referenced_objects(pod)
    vcms, vsecrets = volmod.referenced_objects(pod)
    claims = set(claimmod.claim_names(pod).values())
    return (
        {("configmaps", ns, n) for n in cms | vcms}
        | {("secrets", ns, n) for n in secrets | vsecrets}
        | {("persistentvolumeclaims", ns, n) for n in claims}
    )


#: Where ``ResolvedPod.team`` came from (``vkgate render --explain`` prints it).
TEAM_FROM_LABEL = f"the namespace label {TEAM_LABEL}"
TEAM_FROM_CONFIG = "the team map in config (templates.teams)"
#: The Warning Event on a pod whose namespace's team label was ignored.
REASON_TEAM_LABEL_IGNORED = "TeamLabelIgnored"


class Resolver:
    """A pod → ``ResolvedPod`` (or why not), the same live and offline (see the module doc)."""

    def __init__(
        self,
        refs: Lookups,
        *,
        features: Features,
        backend: str,
        node_name: str,
        host_ip: Callable[[], str],
        allocatable: Callable[[], Mapping[str, str]],
        enable_service_links: bool = True,
        teams: Mapping[str, str] | None = None,
        team_label_namespaces: Collection[str] = (),
        daemonsets: str = "refuse",
        can_exec: bool = False,
        ignore_pod_fields: Collection[str] = (),
        allow_probe_host: bool = False,
    ) -> None:
        """``teams``/``team_label_namespaces``: the operator's ``templates.teams`` and the
        namespaces whose team label may choose (gateway.inputs.teamrule);
        ``daemonsets``: the ``node.daemonsets`` policy (gateway.pods.resolve.admission);
        ``can_exec``: the translator is an ``Executor`` (exec probes can run);
        ``ignore_pod_fields``: ``node.ignore_pod_fields`` (gateway.pods.resolve.features);
        ``allow_probe_host``: ``probes.allow_host`` (gateway.pods.resolve.admission)."""
        self.refs = refs
        self.allow_probe_host = allow_probe_host
        self.ignore_pod_fields = tuple(ignore_pod_fields)
        self.can_exec = can_exec
        self.daemonsets = daemonsets
        #: namespace → team (``templates.teams``): wins over a namespace's team label.
        self.teams = dict(teams or {})
        #: Who is which team (gateway.inputs.teamrule).
        self.team_rule = TeamRule(
            "namespace",
            self.teams,
            tuple(team_label_namespaces),
            "templates.teams",
            "templates.team_label_namespaces",
        )
        self.features = features
        self.backend = backend
        self.node_name = node_name
        self.host_ip = host_ip
        self.allocatable = allocatable
        self.enable_service_links = enable_service_links

    def admission(self, pod: Pod) -> list[Unsupported]:
        """What the node's policy refuses, then the features and volume kinds the backend
        cannot provide (no I/O)."""
        found = admod.node_policy(pod, daemonsets=self.daemonsets)
        found += admod.probe_requests(pod, allow_host=self.allow_probe_host)
        found += featmod.check_pod(pod, self.features, backend=self.backend)
        found += featmod.partition_ignored(self._probes(pod), self.ignore_pod_fields)[0]
        kinds = self.features.volume_kinds
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            kind = volmod.volume_kind(vol)
            if kind not in kinds:
                found.append(
                    featmod.unsupported_volume(str(vol.get("name")), kind, backend=self.backend)
                )
        return found

    def _probes(self, pod: Pod) -> list[Unsupported]:
        return featmod.check_probes(
            pod, self.features, can_exec=self.can_exec, backend=self.backend
        )

    def ignored(self, pod: Pod) -> list[Unsupported]:
        """The probes and hooks of ``pod`` the backend cannot honour and the node runs without
        (``node.ignore_pod_fields``): the prober skips them, each is a Warning Event."""
        if not self.ignore_pod_fields:
            return []
        return featmod.partition_ignored(self._probes(pod), self.ignore_pod_fields)[1]

    def pod_ips(self, pod: Pod) -> tuple[str, ...]:
        status = pod.get("status") or {}
        known = tuple(str(x.get("ip")) for x in status.get("podIPs") or [] if x.get("ip"))
        if known:
            return known
        if status.get("podIP"):
            return (str(status["podIP"]),)
        return (self.features.pod_ip_placeholder or self.host_ip(),)

    async def resolve(self, pod: Pod) -> Resolution:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ns = str(meta.get("namespace", ""))
        out = Resolution(unsupported=self.admission(pod))
        if out.unsupported:
            return out
        for u in self.ignored(pod):
            out.events.append(
                Event(
                    "Warning",
                    featmod.REASON_IGNORED,
                    featmod.ignored_message(u, self.ignore_pod_fields),
                )
            )
        for where, feature in featmod.relaxed_security(pod, self.features):
            out.events.append(
                Event(
                    "Warning",
                    featmod.REASON_RELAXED,
                    f"{where}: securityContext.{feature} may run unenforced: this node relaxes it"
                    f" where the {self.backend} backend cannot enforce it",
                )
            )

        refs = references(pod)
        lookups: dict[RefKey, Lookup] = {}
        results = await asyncio.gather(*(self.refs.get(k[0], k[1], k[2]) for k in sorted(refs)))  # type: ignore[arg-type]
        for key, value in zip(sorted(refs), results, strict=True):
            lookups[key] = value
        pulls = await self._pull_secrets(pod, ns, lookups)
        out.events.extend(pulls.events)
        if pulls.unreadable:  # hold the pod: its credentials would be lost for its lifetime
            reason = "waiting to read image pull secrets: " + "; ".join(pulls.unreadable)
            for group in CONTAINER_GROUPS:
                for c in spec.get(group) or []:
                    out.waiting[str(c.get("name"))] = ("ContainerCreating", reason)
        host = self.host_ip()
        sources = EnvSources(
            configmaps={k[2]: v for k, v in lookups.items() if k[0] == "configmaps"},
            secrets={k[2]: v for k, v in lookups.items() if k[0] == "secrets"},
            services=await self.refs.services(ns),
            pod_ips=self.pod_ips(pod),
            host_ips=(host,),
            allocatable=self.allocatable(),
            enable_service_links=self.enable_service_links,
        )

        containers: dict[str, list[ResolvedContainer]] = {"initContainers": [], "containers": []}
        for group in CONTAINER_GROUPS:
            for c in spec.get(group) or []:
                result = envmod.resolve_container_env(pod, c, sources)
                out.events.extend(result.events)
                if result.error:
                    out.waiting[str(c.get("name"))] = ("CreateContainerConfigError", result.error)
                    continue
                containers[group].append(
                    envmod.resolved_container(c, result, envmod.container_role(c, group))
                )

        tokens: dict[volmod.TokenKey, str | ReadError] = {}
        if not out.waiting:  # tokens are bound to the pod: only ask when we will create
            for tkey in volmod.token_requests(pod):
                tokens[tkey] = await self.refs.token(pod, tkey)
        vols = volmod.resolve_volumes(
            pod, sources, supported_kinds=self.features.volume_kinds, tokens=tokens
        )
        out.events.extend(vols.events)
        out.mount_error = vols.error
        # persistentVolumeClaim volumes carry their bound PersistentVolume (claims.py)
        found = {k[2]: v for k, v in lookups.items() if k[0] == "persistentvolumeclaims"}
        pv_names = sorted({claimmod.bound_volume(v) for v in found.values()} - {""})
        pvs = await asyncio.gather(*(self.refs.persistent_volume(n) for n in pv_names))
        claimed = claimmod.resolve_claims(
            pod, vols.volumes, found, dict(zip(pv_names, pvs, strict=True))
        )
        out.events.extend(claimed.events)
        out.mount_error = out.mount_error or claimed.error
        for name, kind in vols.unsupported:
            out.unsupported.append(featmod.unsupported_volume(name, kind, backend=self.backend))
        if out.blocked:
            return out

        team = await self.team(ns)
        if team.ignored:
            out.events.append(Event("Warning", REASON_TEAM_LABEL_IGNORED, team.ignored))
        resolved = ResolvedPod(
            namespace=ns,
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node_name=self.node_name,
            pod=pod,
            containers=tuple(containers["containers"]),
            init_containers=tuple(containers["initContainers"]),
            volumes=claimed.volumes,
            team=team.team,
            team_source=team.source,
            host_ip=host,
            registry_credentials=pulls.credentials,
        )
        out.pod = resolved
        # Tokens are kept until due (RefCache.token): where the backend updates files in place,
        # a rotated one changes the fingerprint so the update reaches the running workload;
        # elsewhere the token issued at create stays, and a new one is no change to apply.
        skip = (
            set()
            if self.features.updates_files_in_place
            else {t.encode() for t in tokens.values() if isinstance(t, str)}
        )
        out.fingerprint = fingerprint(resolved, skip_contents=skip)
        return out

    async def team(self, namespace: str) -> TeamDecision:
        """The namespace's team: ``templates.teams``, else its label where the operator lets
        it choose (gateway.inputs.teamrule); ``ignored`` says why a label did not count."""
        return self.team_rule.decide(namespace, await self.refs.team(namespace))

    async def _pull_secrets(
        self, pod: Pod, ns: str, lookups: Mapping[RefKey, Lookup]
    ) -> pullmod.PullSecretResult:
        names = pullmod.pull_secret_names(pod)
        if not names:
            return pullmod.PullSecretResult()
        values = await asyncio.gather(
            *(
                _known(lookups[("secrets", ns, n)])
                if ("secrets", ns, n) in lookups
                else self.refs.get("secrets", ns, n)
                for n in names
            )
        )
        return pullmod.resolve_pull_secrets(pod, dict(zip(names, values, strict=True)))


async def _known(value: Lookup) -> Lookup:
    return value


def fingerprint(pod: ResolvedPod, *, skip_contents: set[bytes] | None = None) -> str:
    """A stable hash of what was resolved; ``skip_contents`` (service-account tokens, new on
    every resolution) are left out."""
    skip = skip_contents or set()
    h = hashlib.sha256()
    for c in (*pod.init_containers, *pod.containers):
        env = [(e.name, e.value) for e in c.env]
        h.update(json.dumps([c.name, c.image, c.command, c.args, env]).encode())
    for v in pod.volumes:
        for f in v.files:
            if f.content in skip:
                continue
            h.update(f"{v.name}\0{f.path}\0{f.mode}\0".encode() + f.content)
    return h.hexdigest()[:16]
