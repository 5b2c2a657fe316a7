"""Command ``mtmc.listTargets``: the GPU profiles a client offers for the ``targetGpu`` setting.

The setting is the single source of truth for the target: a client's "Select Target" writes it,
and the server's one ``workspace/didChangeConfiguration`` refresh follows (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from ...optimizer.hardware import PROFILES
from ..app import MtmcLanguageServer


def list_targets() -> list[dict]:
    return [{"key": p.key, "name": p.name, "summary": p.summary()} for p in PROFILES.values()]


def register(server) -> None:
    @server.command("mtmc.listTargets")
    def list_targets_command(ls: MtmcLanguageServer, *args) -> list[dict]:
        return list_targets()
