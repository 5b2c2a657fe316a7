"""Settings: pulled with ``workspace/configuration`` (section ``mtmc``) on start and on every change."""

from __future__ import annotations

import uuid

from lsprotocol import types

from ...settings import Settings

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
    return _apply(ls, raw if isinstance(raw, dict) else {})


def _apply(ls, raw: dict) -> bool:
    if "trusted" in raw and not isinstance(raw["trusted"], bool):
        ls.log(f"ignored mtmc.trusted={raw['trusted']!r}: only true or false count", types.MessageType.Warning)
    settings = Settings.from_client(raw)
    changed = ls.apply_settings(settings)
    ls.log(f"settings: {settings.to_client()}", types.MessageType.Log)
    return changed


def register(server) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls, params: types.DidChangeConfigurationParams) -> None:
        if ls.client_supports("workspace.configuration"):
            changed = await pull_settings(ls)
        else:  # push model: the settings come with the notification
            pushed = params.settings.get(SECTION, params.settings) if isinstance(params.settings, dict) else {}
            changed = _apply(ls, pushed if isinstance(pushed, dict) else {})
        ls.send_status()
        if changed:
            settings_changed(ls)


def settings_changed(ls) -> None:
    """Something diagnostics depend on changed (target, trust, compile diagnostics): refresh them."""
    from . import code_lens, diagnostics

    ls.log(f"target GPU: {ls.target.summary()}")
    diagnostics.refresh_all(ls)
    code_lens.request_refresh(ls)
