"""The kubelet HTTP API: its routes and one handler per endpoint, as virtual-kubelet keeps
them in ``node/api``.

Public: ``KubeletAPI`` (routes.py), which dispatches an authenticated, authorized request to
its handler, and ``PodLookup``, the one thing it needs from the pod controller; the own-metrics
server (ownmetrics.py: ``MetricsServer`` on ``kubelet.metrics_address``, ``Readiness``,
``path_class`` for bounded request labels).

Internal (each says so in its docstring; tests reach them by module): the handlers
``attach``, ``logs``, ``portforward``, ``stats`` and what they use, ``metrics`` (the
``/metrics/resource`` text), ``dial`` (a TCP connection to a pod's port) and ``podports``
(which ports port-forward may reach).  Layers (.importlinter, ``kubelet-api-layers``): routes
over the handlers over ``dial``, ``metrics`` and ``podports``; the package sits over the
stream protocols (``gateway.kubelet.streams``) and the HTTP server
(``gateway.kubelet.server``), and never imports authentication.
"""

from gateway.kubelet.api.ownmetrics import MetricsServer, Readiness, path_class
from gateway.kubelet.api.routes import KubeletAPI, PodLookup

__all__ = ["KubeletAPI", "MetricsServer", "PodLookup", "Readiness", "path_class"]
