"""An HTTPS client for a gateway's kubelet port, as the API server calls it."""

from __future__ import annotations

import ssl
from typing import Any

import httpx


def kubelet_client(gateway: Any, control_plane: Any, *, port: int | None = None) -> httpx.Client:
    """Verifies the kubelet serving CA; presents the API server's kubelet-client certificate.
    ``port``: another kubelet port of the process (one per node with ``[[nodes]]``)."""
    ctx = ssl.create_default_context(cafile=str(control_plane.kubelet_serving_ca.cert))
    cert = control_plane.pki.apiserver_kubelet_client
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return httpx.Client(
        base_url=f"https://127.0.0.1:{port or gateway.settings['kubelet']['port']}",
        verify=ctx,
        trust_env=False,
        timeout=30,
    )
