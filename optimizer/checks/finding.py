"""The ``Finding`` every check reports, and where each code's documentation lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import Span

SEVERITIES = ("error", "warning", "information", "hint")

# The check reference ships inside the package (package data), so the link works offline and
# from an installed wheel; docs/checks.md in the repository is a link to it.
DOCS_FILE = Path(__file__).with_name("checks.md")


def docs_url(code: str) -> str:
    """A ``file://`` URI to the installed check reference, anchored at ``code``'s section."""
    return f"{DOCS_FILE.resolve().as_uri()}#{code.lower()}"


@dataclass
class Finding:
    """One diagnostic: a stable code, a severity, an exact span and a message with the numbers."""

    code: str
    severity: str  # "error" | "warning" | "information" | "hint"
    span: Span
    message: str
    docs_url: str
    kernel: str | None = None
    data: dict = field(default_factory=dict)  # machine-readable facts for quick fixes

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "range": self.span.to_json(),
            "message": self.message,
            "docsUrl": self.docs_url,
            "kernel": self.kernel,
            "data": dict(self.data),
        }


def make_finding(code: str, severity: str, span: Span, message: str, kernel: str | None = None, **data) -> Finding:
    """A finding with its docs link filled in."""
    return Finding(code, severity, span, message, docs_url(code), kernel, data)
