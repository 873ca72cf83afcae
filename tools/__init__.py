"""Repository tooling that is not part of the agent (docs/licences.md: the licence check)."""
