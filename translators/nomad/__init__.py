"""The Nomad backend: a Kubernetes virtual node whose pods are Nomad jobs.

``NomadTranslator`` (``translator``) is the package's one public face; every other module is
internal to it.  Modules: ``config`` (settings), ``client`` + ``errors`` (HTTP), ``jobs``
(pod → job, with ``network``, ``overrides``, ``variables``, ``claims``, ``scheduling``, and
``policy`` + ``pullauth``: the node's policy on the rendered job),
``status`` (allocation → WorkloadState) + ``placements`` (why a job is not placed), ``views``
(job bookkeeping), ``capacity`` (node arithmetic), ``events`` (event stream) + ``notifier``
(push path), ``logs``, ``exec``, ``metrics`` (allocation stats → usage).  The translator's
collaborators, one per job: ``nodes`` (capacity, node info), ``listing`` (reads into the job
book), ``submit`` (render + register), ``purge`` (delete), ``containers`` (logs, exec,
restart, kill).  Facts: docs/design/nomad.md.
"""

from translators.nomad.plugin import SPEC
from translators.nomad.translator import NomadTranslator

__all__ = ["SPEC", "NomadTranslator"]
