"""The Nomad backend: a Kubernetes virtual node whose pods are Nomad jobs.

Modules: ``config`` (settings), ``client`` + ``errors`` (HTTP), ``jobs`` (pod → job),
``status`` (allocation → WorkloadState), ``views`` (job bookkeeping), ``capacity``,
``events`` (event stream) + ``notifier`` (push path), ``logs``, ``exec``, ``metrics``
(allocation stats → usage), ``translator`` (ties them together).  Facts: docs/design/nomad.md.
"""

from translators.nomad.plugin import SPEC
from translators.nomad.translator import NomadTranslator

__all__ = ["SPEC", "NomadTranslator"]
