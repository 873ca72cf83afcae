"""The one boundary between vkgate's Kubernetes side and a backend.

The gateway hands a translator a fully *resolved* pod (env values, volume file contents, team,
template name) and gets backend-neutral data back (``WorkloadState``, ``Capacity``).  A
translator never talks to Kubernetes; that keeps it testable with golden files and lets a third
party ship one as a separate package (entry-point group ``vkgate.translators``).

Required behaviour is the ``Translator`` Protocol.  Optional capabilities are small separate
Protocols (``Notifier``, ``LogReader``, ``Executor``, ``Attacher``, ``PortForwarder``,
``MetricsSource``) that the gateway *detects* with ``isinstance`` — a translator without exec
simply does not implement ``Executor``; nothing is stubbed.

Error tree (every backend maps its HTTP/SDK errors into it in exactly one function)::

    TranslatorError
    ├── BackendError                       the backend said no, or could not be reached
    │   ├── BackendNotFound                404-like; delete treats it as done
    │   ├── BackendConflict                409-like (already exists, version clash)
    │   ├── BackendThrottled(retry_after)  429 / 503 with Retry-After
    │   ├── BackendUnavailable             connection refused, timeout, 5xx
    │   ├── BackendAuthError               401/403: credentials or ACL
    │   └── BackendRejected(reason)        400/422: the spec is invalid (not retryable)
    ├── TranslationError(template, line, field)   a template or schema error (not retryable)
    └── UnsupportedError(reason, field)            the pod asks for something this backend lacks
        └── PolicyRefused(template, field, setting)  the rendered object asks for what the
                                                     node's operator did not allow
"""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, TypeAlias, runtime_checkable

from vkgate_core import quantity as _quantity
from vkgate_core.clock import Clock, SystemClock

# Defined with the registry rules it serves; part of the backend API (translators.api).
from vkgate_core.imageregistry import RegistryCredential
from vkgate_core.kubetypes import Pod
from vkgate_core.quantity import QuantityError
from vkgate_core.timeparse import parse_rfc3339

JSON: TypeAlias = dict[str, Any]

#: Ownership marker every backend workload carries (metadata key / label / tag).
OWNER_KEY = "vkgate.io/owner"
OWNER_VALUE = "vkgate"


# --------------------------------------------------------------------------- errors


class TranslatorError(Exception):
    """Base of every error a translator raises."""

    retryable: bool = False


class BackendError(TranslatorError):
    """The backend refused or failed a call.  ``status`` is the HTTP status where there is one."""

    retryable = True

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BackendNotFound(BackendError):
    retryable = False


class BackendConflict(BackendError):
    pass


class BackendThrottled(BackendError):
    def __init__(
        self, message: str, *, status: int | None = 429, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class BackendUnavailable(BackendError):
    pass


class BackendAuthError(BackendError):
    retryable = True  # credentials may be rotated; retry with backoff, but say why


class BackendRejected(BackendError):
    retryable = False

    def __init__(self, message: str, *, status: int | None = 400, reason: str = "") -> None:
        super().__init__(message, status=status)
        self.reason = reason or "BackendRejected"


class TranslationError(TranslatorError):
    """A template failed to render or its output failed the backend schema.

    An invalid quantity (``vkgate_core.quantity.QuantityError``, a ``ValueError``) is not one
    by type; the pod sync treats both alike (``gateway.pods.act``), so a bad quantity that
    escapes a translator still gives the pod a reason instead of crashing its sync."""

    def __init__(
        self, message: str, *, template: str = "", line: int | None = None, field: str = ""
    ) -> None:
        where = template + (f":{line}" if line else "")
        super().__init__(f"{where}: {message}" if where else message)
        self.template = template
        self.line = line
        self.field = field
        self.detail = message


class PodQuantityError(TranslationError, QuantityError):
    """An invalid quantity met while translating a pod: a ``TranslationError`` so it gives the
    pod a reason like any other, and still the ``ValueError``/``QuantityError`` it was."""


def parse_quantity(value: str | int | float) -> Fraction:
    """``vkgate_core.quantity.parse_quantity`` for translators: an invalid value is a
    ``PodQuantityError`` (every translator reports a bad pod as a ``TranslatorError``)."""
    try:
        return _quantity.parse_quantity(value)
    except QuantityError as exc:
        raise PodQuantityError(str(exc)) from exc


def cpu_millis(value: str | int | float) -> int:
    """``vkgate_core.quantity.cpu_millis`` for translators (see ``parse_quantity``)."""
    try:
        return _quantity.cpu_millis(value)
    except QuantityError as exc:
        raise PodQuantityError(str(exc)) from exc


class UnsupportedError(TranslatorError):
    """The pod asks for a feature the backend cannot provide; ``reason`` becomes the pod reason."""

    def __init__(
        self, message: str, *, reason: str = "UnsupportedByBackend", field: str = ""
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field


class PolicyRefused(UnsupportedError):
    """The rendered object asks for what the node's operator did not allow: ``template``
    (``teams/<team>/…`` names the team) set ``field`` of the backend object, and ``setting`` is
    the node setting that would allow it.  Raised by a backend's policy step after rendering
    (docs/design/threat-model.md, "Render, then admit"), the same for the agent and ``vkgate render``;
    the pod fails with ``reason`` like any ``UnsupportedError``."""

    def __init__(
        self,
        message: str,
        *,
        template: str,
        field: str,
        setting: str,
        reason: str = "PolicyRefused",
    ) -> None:
        super().__init__(
            f"template {template}: {field}: {message} (node setting {setting})",
            reason=reason,
            field=field,
        )
        self.template = template
        self.setting = setting
        self.detail = message

    @classmethod
    def listing(cls, text: str, *, template: str, field: str, setting: str) -> PolicyRefused:
        """A refusal of several fields at once whose ``text`` already names the template and,
        for each field, the setting that would allow it (Nomad's policy step reports every
        field it refuses); ``field`` and ``setting`` are the first's."""
        refused = cls("", template=template, field=field, setting=setting)
        refused.args = (text,)
        refused.detail = text
        return refused


# --------------------------------------------------------------------------- data in


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str
    #: True when the value came from a Secret: translators keep it out of metadata/logs.
    secret: bool = False


@dataclass(frozen=True, slots=True)
class VolumeFile:
    """One file of a resolved volume, relative to the volume's mount root."""

    path: str
    content: bytes
    mode: int = 0o644
    secret: bool = False


@dataclass(frozen=True, slots=True)
class ResolvedVolume:
    """A pod volume turned into data.  ``kind`` is the Kubernetes volume type
    (``configMap``, ``secret``, ``emptyDir``, ``projected``, ``downwardAPI``,
    ``persistentVolumeClaim``)."""

    name: str
    kind: str
    files: tuple[VolumeFile, ...] = ()
    medium: str = ""
    size_limit: str = ""
    #: ``persistentVolumeClaim``: the claim's name, the pod's ``readOnly`` for it, and the
    #: PersistentVolume bound to it as read from the API (gateway/pods/resolve/claims.py).
    claim: str = ""
    claim_read_only: bool = False
    persistent_volume: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class VolumeMount:
    volume: str
    mount_path: str
    read_only: bool = False
    sub_path: str = ""


@dataclass(frozen=True, slots=True)
class ResolvedContainer:
    """A container with everything the gateway could resolve: env in declaration order,
    ``$(VAR)`` already expanded in command/args."""

    name: str
    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    mounts: tuple[VolumeMount, ...] = ()
    working_dir: str = ""
    #: "init", "sidecar" (init container with restartPolicy Always) or "main".
    role: str = "main"
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResolvedPod:
    """Everything a translator needs to create a workload, and nothing Kubernetes-live."""

    namespace: str
    name: str
    uid: str
    node_name: str
    #: The pod object as plain JSON (metadata + spec).  Read-only by convention.
    pod: Pod
    containers: tuple[ResolvedContainer, ...] = ()
    init_containers: tuple[ResolvedContainer, ...] = ()
    volumes: tuple[ResolvedVolume, ...] = ()
    team: str = ""
    #: Where ``team`` came from, for ``vkgate render --explain`` (empty: the namespace label).
    team_source: str = ""
    template: str = ""
    #: Values the node knows (podIP is filled when known, for status.* fieldRefs).
    host_ip: str = ""
    #: Credentials from ``spec.imagePullSecrets`` that match at least one of the pod's
    #: images, in the pod's order.  Translators keep them out of metadata/labels/Meta.
    registry_credentials: tuple[RegistryCredential, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> PodRef:
        return PodRef(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True, slots=True)
class PodRef:
    """Identity of a pod as seen by a backend (all a delete/logs/exec needs)."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# --------------------------------------------------------------------------- data out


def _parse_time(value: str | None) -> _dt.datetime | None:
    return parse_rfc3339(value) if value else None


class Phase(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class ContainerState:
    """One container as the backend reports it.  ``state`` is ``waiting``, ``running`` or
    ``terminated``; the other fields apply as in Kubernetes' ContainerStatus."""

    name: str
    state: str = "waiting"
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    started_at: _dt.datetime | None = None
    finished_at: _dt.datetime | None = None
    restart_count: int = 0
    ready: bool = False
    image: str = ""
    image_id: str = ""
    container_id: str = ""
    #: The previous termination, when the backend restarted the container.
    last_terminated: ContainerState | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ContainerState:
        """From the JSON form used by golden files and benchmarks (field names, RFC 3339 times)."""
        last = d.get("last_terminated")
        return cls(
            name=str(d["name"]),
            state=str(d.get("state", "waiting")),
            reason=str(d.get("reason", "")),
            message=str(d.get("message", "")),
            exit_code=d.get("exit_code"),
            signal=d.get("signal"),
            started_at=_parse_time(d.get("started_at")),
            finished_at=_parse_time(d.get("finished_at")),
            restart_count=int(d.get("restart_count", 0)),
            ready=bool(d.get("ready", False)),
            image=str(d.get("image", "")),
            image_id=str(d.get("image_id", "")),
            container_id=str(d.get("container_id", "")),
            last_terminated=cls.from_json(last) if last else None,
        )


@dataclass(frozen=True, slots=True)
class WorkloadState:
    """What a backend reports about one pod's workload, backend-neutral.

    Phase rules, conditions and "should we write?" live in ``gateway.pods.status``; a
    translator only says what its backend reports.
    """

    ref: PodRef
    backend_id: str
    phase: Phase = Phase.PENDING
    reason: str = ""
    message: str = ""
    #: True once the backend placed the workload (PodReadyToStartContainers).
    placed: bool = False
    pod_ip: str = ""
    host_ip: str = ""
    #: ``pod_ip`` is the host's address, not the pod's own (host networking: Nomad's
    #: ``network_mode = "host"``, Batch): the ports there belong to the host and its other
    #: tenants, and only the pod's declared ``containerPort``s and ``host_ports`` are the
    #: pod's — the only ones ``kubectl port-forward`` reaches (docs/kubelet.md,
    #: "Port-forward").  False: the pod has a network namespace of its own (Nomad bridge /
    #: CNI, Zun), where every port is the pod's.
    host_network: bool = False
    #: With ``host_network``: the ports the backend reserved for the workload on its host
    #: (Nomad: the allocation's reserved and dynamic ports), in ascending order.
    host_ports: tuple[int, ...] = ()
    started_at: _dt.datetime | None = None
    containers: tuple[ContainerState, ...] = ()
    init_containers: tuple[ContainerState, ...] = ()
    #: Backend-side events worth surfacing as Kubernetes Events: (type, reason, message, container).
    events: tuple[tuple[str, str, str, str], ...] = ()
    #: The node name the workload claims (ownership marker value), for orphan cleanup.
    node_name: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any], ref: PodRef) -> WorkloadState:
        """From the JSON form used by golden files and benchmarks (``ref`` from the pod)."""
        return cls(
            ref=ref,
            backend_id=str(d["backend_id"]),
            phase=Phase(d.get("phase", "Pending")),
            reason=str(d.get("reason", "")),
            message=str(d.get("message", "")),
            placed=bool(d.get("placed", False)),
            pod_ip=str(d.get("pod_ip", "")),
            host_ip=str(d.get("host_ip", "")),
            host_network=bool(d.get("host_network", False)),
            host_ports=tuple(sorted(int(p) for p in d.get("host_ports", ()))),
            started_at=_parse_time(d.get("started_at")),
            containers=tuple(ContainerState.from_json(c) for c in d.get("containers", [])),
            init_containers=tuple(
                ContainerState.from_json(c) for c in d.get("init_containers", [])
            ),
        )


@dataclass(frozen=True, slots=True)
class Vanished:
    """A change stream saw the pod's workload deleted (not by this agent's own purge, as far
    as it knows): the controller treats it as a list that no longer has it, at once rather
    than at its next list (docs/design/pod-sync.md, "Lists while the stream is live")."""

    ref: PodRef


@dataclass(frozen=True, slots=True)
class Capacity:
    """Node capacity from the backend.  cpu in millicores, memory in bytes."""

    cpu_millis: int
    memory_bytes: int
    pods: int
    ephemeral_storage_bytes: int | None = None
    #: Extended resources, e.g. {"nvidia.com/gpu": 2}.
    extended: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the backend lets the node say about itself."""

    internal_ip: str = ""
    hostname: str = ""
    os: str = "linux"
    arch: str = "amd64"
    kernel_version: str = ""
    os_image: str = ""
    #: e.g. ``nomad://1.11.3``.
    runtime_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Features:
    """What a backend supports, so the gateway can refuse the rest with a clear reason."""

    #: Volume kinds the translator can place.
    volume_kinds: frozenset[str] = frozenset(
        {"configMap", "secret", "emptyDir", "projected", "downwardAPI"}
    )
    #: Pod spec features (e.g. "hostNetwork", "privileged", "initContainers", "sidecars").
    pod_features: frozenset[str] = frozenset()
    #: Pod spec fields changeable on a live workload without re-create.
    updatable_fields: frozenset[str] = frozenset()
    #: A token the translator replaces backend-side with the workload's IP, in env values,
    #: command and args (e.g. Nomad ``${NOMAD_IP_...}`` or the simulated ``__VKGATE_POD_IP__``).
    #: The gateway puts it wherever ``status.podIP``/``status.podIPs`` fieldRefs resolve (also
    #: inside ``$(VAR)`` expansions) when the pod IP is not known before create.  Empty: the
    #: gateway substitutes the node InternalIP (right for host-network backends).
    pod_ip_placeholder: str = ""
    #: Most main containers (``spec.containers``) per pod the backend accepts (None: no
    #: limit); init containers and sidecars are the ``pod_features`` of those names.
    max_containers: int | None = None
    #: A pod's ``status.podIP`` is an address vkgate can dial, where the pod's processes
    #: listen on their container ports (host networking: Nomad, Zun).  ``kubectl
    #: port-forward`` then connects there when the translator is not a ``PortForwarder``
    #: (to the pod's own ports only when that address is its host's:
    #: ``WorkloadState.host_network``); False (and no ``PortForwarder``): port-forward is
    #: refused, naming the backend.
    routable_pod_ip: bool = False
    #: The ``securityContext`` restrictions the backend can enforce (names of
    #: ``translators.securitycontext.FIELDS``); a pod asking for another is refused.
    security_context: frozenset[str] = frozenset()
    #: Restrictions this node runs without enforcing them where the backend cannot (a
    #: setting, e.g. ``backend.nomad.relax_security_context``); each use is a Warning Event.
    relaxed_security_context: frozenset[str] = frozenset()
    #: The running workload's files follow an update in place (Nomad: the job's Variable),
    #: so a projected service-account token requested again at 80 % of its lifetime reaches
    #: it; False: the token issued at create stays (a new one is no change to apply).
    updates_files_in_place: bool = False
    #: The longest grace between SIGTERM and SIGKILL the backend honours (Nomad: the
    #: client's ``max_kill_timeout``, a node setting); None: no cap.  A pod whose grace period
    #: is longer gets an Event saying what will happen instead (``gateway.pods.decide``).
    max_kill_timeout: int | None = None


# --------------------------------------------------------------------------- protocols


@runtime_checkable
class Translator(Protocol):
    """Required surface of every backend."""

    #: short backend name: "nomad", "zun", "batch", "simulated"
    kind: str
    features: Features

    async def start(self) -> None:
        """Open clients; must not fail because the backend is down (ping reports that)."""

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise ``BackendError`` when the backend is not healthy.  The caller adds a timeout."""

    async def capacity(self) -> Capacity: ...

    async def node_info(self) -> NodeInfo: ...

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        """Submit a workload.  Idempotent by pod UID: an existing one is returned, not doubled."""

    async def update(self, pod: ResolvedPod, current: WorkloadState) -> bool:
        """Apply what can change in place; return False when the change needs a re-create."""

    async def delete(self, ref: PodRef, *, grace_seconds: int) -> WorkloadState | None:
        """Stop (TERM, then KILL after grace) and remove.  Not found = done (no error).

        Returns the workload's final state when it stopped within the call (it is gone
        then), so the agent can finish the pod at once; None when the stop is under way (its
        end is reported by ``changes()`` or ``list()``)."""

    async def list(self) -> Sequence[WorkloadState]:
        """All workloads this node owns, in ONE bulk call (the reconcile backstop)."""


@runtime_checkable
class Notifier(Protocol):
    """A backend that can push changes."""

    def changes(self) -> AsyncIterator[WorkloadState | Vanished]:
        """Yield states as they change, and ``Vanished`` for a workload deleted behind the
        agent's back; reconnect internally.  Never ends until closed."""
        ...


@runtime_checkable
class BackendRequests(Protocol):
    """A backend that counts the HTTP requests it sends, by (method, endpoint) with bounded
    endpoint names (Nomad: the path of ``acl.ENDPOINTS``); exposed as
    ``vkgate_backend_requests_total`` (docs/design/metrics.md)."""

    def backend_requests(self) -> Mapping[tuple[str, str], int]:
        """Requests sent so far, retries included."""
        ...


@runtime_checkable
class StreamHealth(Protocol):
    """A Notifier whose change stream reports a stopping workload's end (its terminal state)
    and can tell whether it is connected right now.  While it is, the agent does not re-list
    every second for pods whose graceful delete waits on the backend (docs/design/pod-sync.md,
    "Waiting for a stop")."""

    def change_stream_live(self) -> bool:
        """True while every watched scope's change stream is connected: then the agent also
        lists the backend only every ``pods.streamed_reconcile_interval``."""
        ...


@dataclass(frozen=True, slots=True)
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    since: _dt.datetime | None = None
    timestamps: bool = False
    limit_bytes: int | None = None
    previous: bool = False
    #: "All", "Stdout" or "Stderr"
    stream: str = "All"


@runtime_checkable
class LogReader(Protocol):
    def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        """Stream log bytes.  Raise ``BackendNotFound`` for unknown pod/container and
        ``BackendRejected`` for an option the backend cannot honour (e.g. ``previous``)."""
        ...


class ExecSession(Protocol):
    """One running exec.  Output arrives as (stream, bytes) with stream 1=stdout, 2=stderr."""

    async def write_stdin(self, data: bytes) -> None: ...

    async def close_stdin(self) -> None: ...

    async def resize(self, width: int, height: int) -> None: ...

    def output(self) -> AsyncIterator[tuple[int, bytes]]: ...

    async def wait(self) -> int:
        """Exit code, once the command ended."""
        ...

    async def cancel(self) -> None: ...


@runtime_checkable
class Executor(Protocol):
    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> ExecSession: ...


@runtime_checkable
class Restarter(Protocol):
    """Kill one running container and start it again in place, as the kubelet does when a
    liveness or startup probe fails (docs/design/probes.md); the backend counts the restart,
    so the container's ``restartCount`` and ``lastState`` follow from its state."""

    async def restart_container(self, ref: PodRef, container: str) -> None: ...


@runtime_checkable
class Killer(Protocol):
    """Stop one running container without restarting it: SIGTERM, SIGKILL once
    ``grace_seconds`` passed — the kubelet's kill of a container whose pod has
    ``restartPolicy: Never`` (a failed liveness probe or postStart hook,
    docs/design/probes.md); the container then ends as the backend reports it."""

    async def kill_container(self, ref: PodRef, container: str, *, grace_seconds: int) -> None: ...


@runtime_checkable
class Attacher(Protocol):
    """``kubectl attach``: join the container's running main process (its stdin/stdout)."""

    async def attach(
        self, ref: PodRef, container: str, *, tty: bool, stdin: bool
    ) -> ExecSession: ...


class PortStream(Protocol):
    """One forwarded connection to a pod's port: bytes both ways, each side closed on its own
    (a client that sent everything half-closes; the pod's answer still flows back)."""

    async def read(self) -> bytes:
        """The next bytes from the pod; ``b""`` once the pod closed its side."""
        ...

    async def write(self, data: bytes) -> None:
        """Send to the pod; waits while the pod is not reading (back-pressure)."""
        ...

    async def close_write(self) -> None:
        """The client has sent everything (half-close); reads go on."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class PortForwarder(Protocol):
    """``kubectl port-forward`` through the backend's own tunnel to a pod.  Without it the
    gateway dials ``status.podIP:port`` itself when ``Features.routable_pod_ip`` says so.
    Either way the gateway asks for a port of a ``WorkloadState.host_network`` pod only
    when the pod declared it or the backend reserved it (``host_ports``)."""

    async def port_forward(self, ref: PodRef, port: int) -> PortStream:
        """A new connection to ``port`` of the pod.  A failure raises ``TranslatorError``
        whose message says why (``dial tcp 10.0.0.5:8080: connect: connection refused``);
        it reaches the client on the connection's error stream."""
        ...


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    name: str
    cpu_core_seconds: float | None = None
    cpu_nano_cores: int | None = None
    memory_working_set_bytes: int | None = None
    memory_rss_bytes: int | None = None
    started_at: _dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class PodUsage:
    ref: PodRef
    containers: tuple[ContainerUsage, ...]
    started_at: _dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class NodeUsage:
    time: _dt.datetime
    pods: tuple[PodUsage, ...]
    cpu_core_seconds: float | None = None
    cpu_nano_cores: int | None = None
    memory_working_set_bytes: int | None = None


@runtime_checkable
class MetricsSource(Protocol):
    async def usage(self) -> NodeUsage:
        """Resource usage; fields the backend cannot tell stay None (never fake zeros)."""
        ...


@runtime_checkable
class FeatureAware(Protocol):
    """An offline ``Renderable`` whose features depend on its settings (Zun: the configured
    microversion); otherwise the backend spec's ``features`` stand."""

    features: Features


@runtime_checkable
class Renderable(Protocol):
    """A backend that can show the spec it would send, offline (``vkgate render``,
    ``vkgate templates check``, ConfigMap template validation).  No I/O: settings only."""

    def render_spec(self, pod: ResolvedPod) -> JSON:
        """The exact request body ``create`` would send for ``pod`` (template ``pod.template``
        if set, else the backend default); template errors raise ``TranslationError``."""
        ...


@dataclass(frozen=True, slots=True)
class TranslatorContext:
    """What a translator factory receives: its settings table and the node it serves."""

    node_name: str
    settings: Mapping[str, Any]
    #: Template renderer (``translators.render.engine.Renderer``); typed loosely to keep this
    #: module dependency-free.
    renderer: Any = None
    #: The backend's time: every sleep, poll, deadline and timestamp of a translator goes
    #: through it, so tests hand every backend the same fake clock the same way.
    clock: Clock = field(default_factory=SystemClock)
