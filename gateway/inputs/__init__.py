"""The agent's inputs: the sources pod rendering reads, and the one gate that holds pod syncs
until each has loaded (docs/design/startup.md).

* ``gate`` — ``Input`` and ``InputsGate``, the start-up gate;
* ``teams`` — ``NamespaceTeams``, the process-wide watch of the namespaces' team labels (one of
  the inputs the gate waits for);
* ``teamrule`` — ``TeamRule``, who is which team: the operator's map, and a label only where the
  operator lets it choose (docs/design/teams.md).

Both sit in the ``inputs`` layer of the gateway (contract ``gateway-layers``): over the kube
client they watch through, under the pod sync, the Node and the app that read them.
"""

from gateway.inputs.gate import NOT_SYNCED, Input, InputsGate
from gateway.inputs.teamrule import TeamDecision, TeamRule
from gateway.inputs.teams import NamespaceTeams

__all__ = ["NOT_SYNCED", "Input", "InputsGate", "NamespaceTeams", "TeamDecision", "TeamRule"]
