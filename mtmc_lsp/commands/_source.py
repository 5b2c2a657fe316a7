"""Reading a command's Triton file and its target GPU, with one-line errors instead of tracebacks."""

from __future__ import annotations

import sys
from pathlib import Path


def read_source(command: str, file: str, target_setting: str):
    """``(path, text, target)`` for FILE and ``--target``; None once the reason is printed (exit 2)."""
    from mtmc_lsp.optimizer.hardware import resolve_target

    path = Path(file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"mtmc {command}: cannot read {path}: {exc}", file=sys.stderr)
        return None
    try:
        target = resolve_target(target_setting)
    except KeyError as exc:
        print(f"mtmc {command}: {exc.args[0]}", file=sys.stderr)
        return None
    return path, text, target
