"""The kubelet HTTPS API on :10250 — logs, exec/attach, stats and metrics — with
authentication, authorization and the SPDY/WebSocket stream codecs it needs.

``KubeletServer`` (service.py) is the entry point the App starts; it depends on the pod
controller only through ``PodLookup`` and on the API server only through ``ReviewClient``.
"""

from gateway.kubelet.auth import ReviewClient
from gateway.kubelet.routes import PodLookup
from gateway.kubelet.service import KubeletServer

__all__ = ["KubeletServer", "PodLookup", "ReviewClient"]
