"""The resolver: a pod and what it references → a ``ResolvedPod``, or why not
(docs/design/pod-sync.md).

* ``resolver`` — ``Resolver`` and its ports: ``Lookups`` (what resolution reads) with
  ``RefCache``, the live adapter (ConfigMaps, Secrets, claims by name; tokens; the team);
* ``admission`` — the node's own policy (DaemonSet pods);
* ``features`` — what the backend cannot provide (pod features, securityContext, probes and
  hooks), the catalogue ``vkgate render --explain`` prints;
* ``env``, ``volumes``, ``claims``, ``pullsecrets`` — the pure rules for env values, volume
  files, persistentVolumeClaims and registry credentials.

Only ``resolver`` does I/O (through the kube client and ``gateway.inputs.teams``); the others are
pure functions.  The outcome type, ``Resolution``, lives below this package
(``gateway.pods.resolution``), so the decision reads it without importing the resolver.
"""

from gateway.pods.resolution import Resolution, Unsupported
from gateway.pods.resolve.env import Lookup, ReadError
from gateway.pods.resolve.resolver import Kind, Lookups, RefCache, Resolver, references

__all__ = [
    "Kind",
    "Lookup",
    "Lookups",
    "ReadError",
    "RefCache",
    "Resolution",
    "Resolver",
    "Unsupported",
    "references",
]
