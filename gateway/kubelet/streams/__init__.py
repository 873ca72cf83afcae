"""The Kubernetes stream protocols under exec, attach and port-forward.

* ``session`` — one exec or attach: protocol negotiation, the upgrade, the pumps between the
  client's streams and the backend's ``ExecSession``, the final Status on the error stream;
  ``upgrade_spdy`` is shared with port-forward (``gateway.kubelet.api.portforward``).
* ``spdy`` — a server-side SPDY/3.1: frames, header compression, sessions, flow control.
* ``websocket`` — the numbered-channel protocols over WebSocket (wsproto framing).

``spdy`` and ``websocket`` are the two codecs, public as modules: port-forward speaks its own
protocol on them.  Layers (.importlinter, ``kubelet-streams-layers``): session over the two
codecs, which are independent of each other; the package sits over the HTTP server
(``gateway.kubelet.server``) whose connection an upgrade takes over.
"""

from gateway.kubelet.streams import spdy, websocket
from gateway.kubelet.streams.session import (
    ERROR,
    IDLE_TIMEOUT,
    STDERR,
    STDIN,
    STDOUT,
    STREAM_CREATION_TIMEOUT,
    Channels,
    ExecOptions,
    parse_exec_options,
    run_session,
    serve,
    upgrade_spdy,
)

__all__ = [
    "ERROR",
    "IDLE_TIMEOUT",
    "STDERR",
    "STDIN",
    "STDOUT",
    "STREAM_CREATION_TIMEOUT",
    "Channels",
    "ExecOptions",
    "parse_exec_options",
    "run_session",
    "serve",
    "spdy",
    "upgrade_spdy",
    "websocket",
]
