"""OpenStack Zun backend: single-container pods as Zun containers, the rest as capsules.

Entry point ``translators.zun:ZunTranslator`` (group ``vkgate.translators``).  Facts it relies
on: docs/design/zun.md.  Modules: ``config`` (settings table), ``auth`` (Keystone,
off the event loop), ``client`` (HTTP + microversions + errors), ``spec`` (pod → JSON through
``templates/zun``), ``status`` (JSON → ``WorkloadState``), ``capacity`` (quotas), ``logs``,
``exec``, ``translator`` (the per-node object).
"""

from translators.zun.plugin import SPEC
from translators.zun.translator import ZunTranslator

__all__ = ["SPEC", "ZunTranslator"]
