"""The Nomad backend: a Kubernetes virtual node whose pods are Nomad jobs.

Modules: ``config`` (settings), ``client`` + ``errors`` (HTTP), ``jobs`` (pod → job),
``status`` (allocation → WorkloadState), ``capacity``, ``events`` (event stream),
``logs``, ``exec``, ``translator`` (ties them together).  Facts: shared/reference/nomad.md.
"""

from translators.nomad.translator import NomadTranslator

__all__ = ["NomadTranslator"]
