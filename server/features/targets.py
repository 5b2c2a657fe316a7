"""Commands ``mtmc.listTargets`` and ``mtmc.selectTarget``: the GPU profiles and the session's target."""

from __future__ import annotations

from ...optimizer.hardware import PROFILES
from . import code_lens, diagnostics


def list_targets() -> list[dict]:
    return [{"key": p.key, "name": p.name, "summary": p.summary()} for p in PROFILES.values()]


def register(server) -> None:
    @server.command("mtmc.listTargets")
    def list_targets_command(ls, *args) -> list[dict]:
        return list_targets()

    @server.command("mtmc.selectTarget")
    def select_target(ls, *args) -> dict:
        if not args or not isinstance(args[0], str):
            raise ValueError("mtmc.selectTarget takes one argument: a target key from mtmc.listTargets")
        profile = ls.select_target(args[0])  # KeyError with the known keys for a bad name
        ls.log(f"target GPU: {profile.summary()}")
        ls.send_status()
        diagnostics.refresh_all(ls)
        code_lens.request_refresh(ls)
        return {"key": profile.key, "name": profile.name, "summary": profile.summary()}
