"""The Azure Batch backend: pods become tasks in one Batch job per virtual node.

Entry point ``vkgate.translators:batch`` → ``BatchTranslator``.  Module map: ``settings`` (the
``[backend.batch]`` table), ``transport`` (azure-core over httpx), ``client`` (SDK calls, retries,
error mapping), ``spec`` (pod → task JSON), ``submit`` (add-task-collection bursts), ``status``
(task → WorkloadState), ``capacity`` (pool → node capacity), ``logs`` (task files),
``translator`` (the glue).
"""

from translators.batch.plugin import SPEC
from translators.batch.translator import BatchTranslator

__all__ = ["SPEC", "BatchTranslator"]
