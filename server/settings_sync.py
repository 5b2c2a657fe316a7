"""Settings from the client: pulled with ``workspace/configuration`` (section ``mtmc``) or pushed, then applied."""

from __future__ import annotations

import uuid

from lsprotocol import types

from ..settings import Settings
from . import diagnostics
from .publishing import refresh_code_lenses

SECTION = "mtmc"


async def register_for_changes(ls) -> None:
    """Ask for ``workspace/didChangeConfiguration`` when the client registers it dynamically."""
    if not ls.client_supports("workspace.did_change_configuration.dynamic_registration"):
        return
    registration = types.Registration(
        id=str(uuid.uuid4()),
        method=types.WORKSPACE_DID_CHANGE_CONFIGURATION,
        register_options=types.DidChangeConfigurationRegistrationOptions(section=SECTION),
    )
    try:
        await ls.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
    except Exception as exc:  # a client may refuse; settings still arrive with the notification
        ls.log(f"could not register for configuration changes: {exc}", types.MessageType.Log)


async def pull_settings(ls) -> bool:
    """Fetch the ``mtmc`` section and apply it; True when diagnostics must be recomputed."""
    if not ls.client_supports("workspace.configuration"):
        return False
    try:
        result = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
        )
    except Exception as exc:
        ls.log(f"workspace/configuration failed: {exc}", types.MessageType.Warning)
        return False
    raw = result[0] if result else None
    return apply_raw(ls, raw if isinstance(raw, dict) else {})


def apply_raw(ls, raw: dict) -> bool:
    if "trusted" in raw and not isinstance(raw["trusted"], bool):
        ls.log(f"ignored mtmc.trusted={raw['trusted']!r}: only true or false count", types.MessageType.Warning)
    settings = Settings.from_client(raw)
    changed = ls.apply_settings(settings)
    ls.log(f"settings: {settings.to_client()}", types.MessageType.Log)
    return changed


def settings_changed(ls) -> None:
    """Something diagnostics depend on changed (target, trust, compile diagnostics): refresh them."""
    ls.log(f"target GPU: {ls.target.summary()}")
    diagnostics.refresh_all(ls)
    refresh_code_lenses(ls)
