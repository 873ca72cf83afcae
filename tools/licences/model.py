"""What the licence check reports for one component (a Go module or a Python distribution)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Component", "LicenceFile"]


@dataclass(frozen=True)
class LicenceFile:
    """One licence file and what its text holds."""

    name: str
    licences: tuple[str, ...]
    forbidden: tuple[str, ...] = ()
    #: The licence of the component's documentation, not of its code (``LICENSE.docs``).
    documentation: bool = False


@dataclass(frozen=True)
class Component:
    """A component, its licences, where they were read, and why it fails (empty: it passes)."""

    ecosystem: str  # "go" or "python"
    name: str
    licences: tuple[str, ...]
    source: str
    problems: tuple[str, ...] = ()
    #: The reviewed exception that decided this component (docs/licences.md, "Exceptions").
    exception: str = ""
    #: Go: the binaries that link the module.
    used_by: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems
