"""The template rendering engine shared by every backend: the sandboxed Jinja environment and
its budgets, the filters, parsing the rendered output, the backend schemas, the render
worker processes and their pool (docs/design/template-safety.md)."""
