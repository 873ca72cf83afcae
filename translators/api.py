"""The public backend API: the one module a backend plugin imports from vkgate.

A backend — built in or a third-party distribution — is a ``BackendSpec`` published under the
entry-point group ``vkgate.translators`` (docs/design/backend-plugins.md).  Everything such a
package needs is re-exported here, so a plugin names one module and vkgate stays free to move
the rest::

    from translators.api import BackendSpec, Translator, TranslatorContext, WorkloadState, …

What it holds, by what a plugin does with it:

==============================  ===========================================================
the spec                        ``BackendSpec``, ``GROUP``; ``Features`` (what the backend
                                supports before it starts)
the translator                  ``Translator`` and the optional capability Protocols
                                ``Notifier``, ``LogReader``, ``Executor``/``ExecSession``,
                                ``Attacher``, ``PortForwarder``/``PortStream``,
                                ``MetricsSource``; ``Renderable`` and
                                ``FeatureAware`` for ``BackendSpec.offline``;
                                ``TranslatorContext`` (what the factory receives) and its
                                ``Clock``
data in                         ``ResolvedPod`` and its parts, ``PodRef``, ``LogOptions``
data out                        ``WorkloadState``, ``Phase``, ``ContainerState``,
                                ``Capacity``, ``NodeInfo``, the usage types
errors                          the ``TranslatorError`` tree (drawn in ``translators.base``)
templates                       ``Renderer`` and ``pod_context`` (the context every backend
                                template receives)
settings                        ``coerce``, ``unknown_keys``, ``report``, ``Setting``,
                                ``SettingsError`` (``vkgate_core.settings``)
helpers                         Kubernetes quantities, registry credential matching, the
                                ownership marker; ``SimulatedTranslator``, the in-memory
                                reference backend a test double may build on
the contract                    ``BackendHarness``, ``CHECKS``, ``NotApplicable``,
                                ``Outcome``: the suite every backend passes
                                (``translators.contract``; docs/backend-authors.md)
==============================  ===========================================================

Only names listed in ``__all__`` are the API; a plugin that imports anything else from vkgate
may break with any release (``tests/unit/test_backend_plugin.py`` holds the acme test plugin to
this).
"""

from __future__ import annotations

from translators.base import (
    JSON,
    OWNER_KEY,
    OWNER_VALUE,
    Attacher,
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
    Capacity,
    ContainerState,
    ContainerUsage,
    EnvVar,
    ExecSession,
    Executor,
    FeatureAware,
    Features,
    LogOptions,
    LogReader,
    MetricsSource,
    NodeInfo,
    NodeUsage,
    Notifier,
    Phase,
    PodRef,
    PodUsage,
    PortForwarder,
    PortStream,
    Renderable,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    Translator,
    TranslatorContext,
    TranslatorError,
    UnsupportedError,
    Vanished,
    VolumeFile,
    VolumeMount,
    WorkloadState,
    cpu_millis,
    parse_quantity,
)
from translators.contract import CHECKS, BackendHarness, Check, NotApplicable, Outcome
from translators.plugins import GROUP, BackendSpec, SettingsParser
from translators.render.engine import Renderer, pod_context
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import Clock
from vkgate_core.imageregistry import RegistryCredential, credential_for
from vkgate_core.settings import Setting, SettingsError, coerce, report, unknown_keys

__all__ = [
    "CHECKS",
    "GROUP",
    "JSON",
    "OWNER_KEY",
    "OWNER_VALUE",
    "Attacher",
    "BackendAuthError",
    "BackendConflict",
    "BackendError",
    "BackendHarness",
    "BackendNotFound",
    "BackendRejected",
    "BackendSpec",
    "BackendThrottled",
    "BackendUnavailable",
    "Capacity",
    "Check",
    "Clock",
    "ContainerState",
    "ContainerUsage",
    "EnvVar",
    "ExecSession",
    "Executor",
    "FeatureAware",
    "Features",
    "LogOptions",
    "LogReader",
    "MetricsSource",
    "NodeInfo",
    "NodeUsage",
    "NotApplicable",
    "Notifier",
    "Outcome",
    "Phase",
    "PodRef",
    "PodUsage",
    "PortForwarder",
    "PortStream",
    "RegistryCredential",
    "Renderable",
    "Renderer",
    "ResolvedContainer",
    "ResolvedPod",
    "ResolvedVolume",
    "Setting",
    "SettingsError",
    "SettingsParser",
    "SimulatedTranslator",
    "TranslationError",
    "Translator",
    "TranslatorContext",
    "TranslatorError",
    "UnsupportedError",
    "Vanished",
    "VolumeFile",
    "VolumeMount",
    "WorkloadState",
    "coerce",
    "cpu_millis",
    "credential_for",
    "parse_quantity",
    "pod_context",
    "report",
    "unknown_keys",
]
