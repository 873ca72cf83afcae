"""The licence check of the lint tier (docs/licences.md).

Every Go module linked into a binary the project builds (golang.py) and every Python
distribution installed in the environment it runs in (python.py) must carry an accepted
(OSI-approved) licence; texts.py classifies licence texts, spdx.py knows identifiers and
expressions, report.py writes docs/licences.md's tables.  Run ``python -m tools.licences``.
"""
