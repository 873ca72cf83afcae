"""The neutral core below both ``gateway/`` and ``translators/``: what both sides need and
neither owns — time as a dependency (``clock``) and the one way to read settings
(``settings``).  It imports neither side (.importlinter)."""
