"""The backend-agnostic pod lifecycle (docs/design/pod-sync.md; the floor plan is in
docs/architecture.md, "The floor plan of gateway/pods").

* The sync core, here: ``controller`` (``PodController``: the loops, one worker per pod key),
  ``act`` (carries out a plan), ``decide`` (pod + backend state + memory → a plan, pure),
  ``plan``, ``memory``, ``queue``, ``keys``, ``translation`` (render retries), and the data that
  passes between the rooms: ``events`` (``Event``) and ``resolution`` (``Resolution``).
* ``resolve/`` — the resolver: a pod's env, volumes, claims, pull secrets and admission.
* ``status/`` — the status manager, the one writer of PodStatus, and its pure rules.

``PodController`` is the package's public face; every other module of the core is internal to
the pod sync (its siblings, the two sub-packages and the tests import it).
"""

from gateway.pods.controller import PodController

__all__ = ["PodController"]
