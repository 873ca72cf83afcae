"""PodStatus: the one writer and the rules it writes by (docs/design/pod-sync.md, "The status
manager").

* ``manager`` — ``StatusManager``, the only writer of pod status (inputs in, a strategic-merge
  patch out, only on change) and the transition Events; it imports the kube client.
* ``rules`` — the pure mapping from what a backend reports to PodStatus (phase, conditions,
  container statuses) and the diff that decides whether to write; no I/O.
* ``ephemeral`` — the status of ephemeral containers a backend cannot run; pure.

The pure modules import nothing of the pod sync; the decision (``gateway.pods.decide``) reads
them, never the manager (import-linter contract ``decide-pure``).
"""

from gateway.pods.status import ephemeral, rules
from gateway.pods.status.manager import FIRST_STATUS_DELAY, StatusManager, Write

__all__ = ["FIRST_STATUS_DELAY", "StatusManager", "Write", "ephemeral", "rules"]
