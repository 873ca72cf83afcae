"""An ``httpGet`` probe's request as it goes on the wire, and what a pod may put in it.

The kubelet's prober sends through Go's HTTP client, which refuses to write a request whose
header names are not HTTP tokens or whose header values hold control characters
(``httpguts.ValidHeaderFieldName`` / ``ValidHeaderFieldValue``: "net/http: invalid header
field value"), and whose URL holds control characters ("net/url: invalid control character in
URL").  vkgate writes the request itself (gateway.probes.handlers, for the CPU:
docs/design/probes.md, "Cost"), so the same rules live here, in one place, read twice:

* admission refuses a pod whose probe or httpGet hook breaks them, naming the field
  (``gateway.pods.resolve.admission.probe_requests``), so the pod never runs;
* ``request`` refuses to build the bytes of one that got past it (``Refused``): a CR or LF
  from a pod's string never reaches a socket, where it would end one request and start
  another (request smuggling: docs/design/probes.md, "What a probe may send, and where").

The rules (a pod string breaking one is refused, never rewritten):

* a header name is a non-empty HTTP token (RFC 9110 ``tchar``);
* a header value holds no control character but HTAB (< U+0020, U+007F), as Go's; other
  characters go out as UTF-8, and the value's leading and trailing blanks are trimmed, as Go
  writes it;
* the path holds no control character and no space; it goes out with ``/`` in front, without
  its ``#fragment``, and with every non-ASCII character percent-encoded as UTF-8 (what Go's
  ``url.URL.RequestURI`` sends);
* a ``host`` is an IP address or a DNS name.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Mapping
from typing import Any

#: The User-Agent the kubelet's HTTP probes send (``kube-probe/<major>.<minor>``).
USER_AGENT = "kube-probe/1.31"
#: RFC 9110 ``tchar``: what a header name is made of.
TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
#: What an IP address or a DNS name is made of (no zone: ``%`` would let anything follow).
_HOST_CHARS = frozenset(string.ascii_letters + string.digits + "-.:")


class Refused(ValueError):
    """A probe's request that must not be sent: ``field`` (relative to the handler, e.g.
    ``httpHeaders[0].value``) breaks ``why``."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def _show(ch: str) -> str:
    return f"U+{ord(ch):04X}"


def _control(ch: str) -> bool:
    """A C0 control or DEL (Go's ``isCTL``), or half of a surrogate pair (no text at all)."""
    o = ord(ch)
    return o < 0x20 or o == 0x7F or 0xD800 <= o <= 0xDFFF


def header_name_error(name: str) -> str | None:
    if not name:
        return "a header name must not be empty"
    bad = next((ch for ch in name if ch not in TOKEN_CHARS), None)
    if bad is not None:
        return (
            f"the character {_show(bad)} is not allowed in a header name (an HTTP token: "
            "letters, digits and !#$%&'*+-.^_`|~)"
        )
    return None


def header_value_error(value: str) -> str | None:
    bad = next((ch for ch in value if _control(ch) and ch != "\t"), None)
    if bad is not None:
        return f"the control character {_show(bad)} is not allowed in a header value"
    return None


def path_error(path: str) -> str | None:
    bad = next((ch for ch in path if _control(ch) or ch == " "), None)
    if bad is not None:
        what = "a space" if bad == " " else f"the control character {_show(bad)}"
        return f"{what} is not allowed in a URL path (percent-encode it)"
    return None


def host_error(host: str) -> str | None:
    """Why ``host`` is neither an IP address nor a DNS name (empty: the pod's address)."""
    if not host:
        return None
    if all(ch in _HOST_CHARS for ch in host) and len(host) <= 253:
        try:
            ipaddress.ip_address(host)
            return None
        except ValueError:
            if _DNS_NAME.fullmatch(host):
                return None
    return "not an IP address or a DNS name"


def problems(handler: str, action: Mapping[str, Any]) -> list[Refused]:
    """Each string of an ``httpGet`` or ``tcpSocket`` action that must not be sent."""
    out: list[Refused] = []
    host = action.get("host")
    if host and (why := host_error(str(host))) is not None:
        out.append(Refused("host", why))
    if handler != "httpGet":
        return out
    path = action.get("path")
    if path and (why := path_error(str(path))) is not None:
        out.append(Refused("path", why))
    for i, h in enumerate(action.get("httpHeaders") or []):
        if not isinstance(h, Mapping):
            out.append(Refused(f"httpHeaders[{i}]", "not a name and value"))
            continue
        if (why := header_name_error(str(h.get("name", "")))) is not None:
            out.append(Refused(f"httpHeaders[{i}].name", why))
        if (why := header_value_error(str(h.get("value", "")))) is not None:
            out.append(Refused(f"httpHeaders[{i}].value", why))
    return out


def request_target(path: str) -> str:
    """What the request line carries for ``path`` (already free of controls and spaces)."""
    path = path.split("#", 1)[0] or "/"
    if not path.startswith("/"):
        path = "/" + path
    if path.isascii():
        return path
    return "".join(ch if ch.isascii() else "".join(f"%{b:02X}" for b in ch.encode()) for ch in path)


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def request(action: Mapping[str, Any], *, host: str, port: int) -> bytes:
    """The bytes of one probe ``GET`` (``Connection: close``) to ``host``:``port``; ``Refused``
    rather than write anything the rules above refuse (``host`` included: the pod's address
    comes from the backend)."""
    found = problems("httpGet", {**action, "host": host})
    if found:
        raise found[0]
    where = host_port(host, port)
    headers = {"Host": where, "User-Agent": USER_AGENT, "Accept": "*/*"}
    for h in action.get("httpHeaders") or []:
        name = str(h.get("name", ""))
        headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
        headers[name] = str(h.get("value", "")).strip(" \t")
    target = request_target(str(action.get("path") or "/"))
    head = f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "Connection: close\r\n\r\n").encode()
