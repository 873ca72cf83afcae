"""Static host ports for raw_exec pods in host mode.

A host-mode pod's server binds a port of the test's network namespace, where the API server,
etcd, Nomad and vkgate keep hundreds of loopback connections open.  A port in Linux's ephemeral
range (32768-60999) can be the local port of one of those connections, and then the pod's
server fails to bind: it exits, restarts, and a test waiting for a probe's verdict sees a crash
instead.  Nomad hands out dynamic ports from 20000-32000, so a static port there can be another
allocation's.  The ports here stay below both.
"""

from __future__ import annotations

#: the range the probe tests draw from; test_nomad_networking keeps 18000-18999 for its own
LOW, HIGH = 10000, 18000


def host_port_base(tag: str, span: int) -> int:
    """The first of ``span`` consecutive free-by-construction ports for a test tagged ``tag``
    (hex): below the ephemeral and Nomad's dynamic ranges, spread by the tag so that a test
    rerun in the same namespace does not meet its predecessor's ports."""
    return LOW + int(tag, 16) % (HIGH - LOW - span)
