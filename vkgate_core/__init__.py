"""The neutral core below both ``gateway/`` and ``translators/``: what both sides need and
neither owns — time as a dependency (``clock``), the one way to read settings (``settings``) and
the one retry layer for HTTP clients (``retry``, docs/design/retry.md).  It imports neither side
(.importlinter)."""
