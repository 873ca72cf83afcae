"""Runtime dependencies the hot HTTP path relies on without declaring them itself."""

from __future__ import annotations

import builtins
import re
from importlib import metadata
from typing import Any

import httpx
import pytest
from httpcore import _synchronization


def test_sniffio_is_a_declared_runtime_dependency() -> None:
    names = {
        re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower()
        for r in metadata.requires("vkgate") or []
    }
    assert "sniffio" in names


async def test_async_requests_never_retry_a_failing_sniffio_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpcore calls ``current_async_library()`` (``import sniffio``) for every async lock;
    a missing sniffio makes each of those a failed import, a search of sys.path every time."""
    failed: list[str] = []
    real_import = builtins.__import__

    def counting_import(name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_import(name, *args, **kwargs)
        except ImportError:
            failed.append(name)
            raise

    monkeypatch.setattr(builtins, "__import__", counting_import)
    assert _synchronization.current_async_library() == "asyncio"
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(), base_url="http://127.0.0.1:9"
    ) as client:
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await client.get("/", timeout=2)
    assert "sniffio" not in failed
