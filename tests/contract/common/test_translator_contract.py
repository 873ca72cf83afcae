"""Every backend passes one contract: ``translators.contract.CHECKS`` against each harness of
the ``backend`` fixture (conftest.py) — simulated, nomad (a respx-mocked Nomad serving captured
Nomad JSON), zun (Zun's own API code in-process), batch (the Batch fake) and the third-party
acme plugin.  A check a backend declares it cannot take is a skip that names why.

Each backend's tier runs its own parametrisation (tox.ini: ``-k <kind>``)."""

from __future__ import annotations

import pytest
from contract_backends import HARNESSES

from translators.api import CHECKS, BackendHarness, Check, NotApplicable
from translators.plugins import kinds

pytestmark = pytest.mark.contract


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
async def test_contract(backend: BackendHarness, check: Check) -> None:
    try:
        await check(backend)
    except NotApplicable as exc:
        pytest.skip(str(exc))


def test_every_installed_backend_has_a_harness() -> None:
    """The suite runs on every installed backend (built in and plugins), never on none."""
    assert set(kinds()) <= set(HARNESSES), (
        f"backends without a harness: {set(kinds()) - set(HARNESSES)}"
    )
    assert {"simulated", "nomad", "zun", "batch", "acme"} <= set(HARNESSES)
    assert len(CHECKS) >= 10
