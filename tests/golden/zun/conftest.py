"""Make the shared Zun test helpers (tests/contract/zun) importable from the golden tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "contract" / "zun"))
