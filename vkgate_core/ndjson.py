"""Lines of a newline-delimited JSON body (Nomad's event stream, a Kubernetes watch).

Not ``httpx``'s ``aiter_lines``: it splits as ``str.splitlines`` does, also at U+0085 (NEL),
U+2028 and U+2029, which JSON may carry raw inside strings (Nomad's encoder writes NEL raw; so
does Go's ``encoding/json``), so one pod string holding one tore its events.  Here a line ends
at b"\\n" only and the bytes between are handed on as they came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator


async def lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The b"\\n"-terminated lines of ``chunks`` (without the b"\\n").  A last line without one
    is not yielded: the body was cut mid-line."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            yield bytes(buf[start:end])
            start = end + 1
        del buf[:start]
