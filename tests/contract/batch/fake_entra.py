"""A Microsoft Entra ID token endpoint on loopback, over TLS, for the azure-identity path.

azure-identity refuses an authority that is not ``https`` (``normalize_authority``), so the
server speaks TLS with a certificate for ``127.0.0.1`` issued by a throw-away CA; the client
side trusts that CA through the httpx client handed to the credential's transport.  It answers
the client-credentials grant (``POST /<tenant>/oauth2/v2.0/token``) for one app registration
and records every form it receives.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from devstack import certs


class EntraTokenServer:
    """A context manager; ``url`` is the authority host (``https://127.0.0.1:<port>``)."""

    def __init__(
        self,
        directory: Path,
        *,
        tenant: str,
        client_id: str,
        client_secret: str,
        on_token: Callable[[str], None],
    ) -> None:
        ca = certs.new_ca(directory, "entra-ca", "entra test CA")
        leaf = certs.issue(ca, directory, "entra", cn="127.0.0.1", ips=["127.0.0.1"], server=True)
        self.ca_file = ca.files.cert
        self.forms: list[tuple[str, dict[str, str]]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                owner.forms.append((self.path, form))
                ok = (
                    self.path == f"/{tenant}/oauth2/v2.0/token"
                    and form.get("grant_type") == "client_credentials"
                    and form.get("client_id") == client_id
                    and form.get("client_secret") == client_secret
                )
                if not ok:
                    self._reply(401, {"error": "invalid_client", "error_description": "no"})
                    return
                token = "eyJ0" + uuid.uuid4().hex
                on_token(token)
                self._reply(
                    200,
                    {"token_type": "Bearer", "expires_in": 3600, "access_token": token},
                )

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(leaf.cert, leaf.key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EntraTokenServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
