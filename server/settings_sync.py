"""Settings from the client: pulled with ``workspace/configuration`` (section ``mtmc``) or pushed, then applied."""

from __future__ import annotations

import re
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
    raw = result[0] if isinstance(result, (list, tuple)) and result else None
    if not isinstance(raw, dict):  # null: the client has no such section (Neovim without settings)
        ls.log("workspace/configuration gave no mtmc section: the initializationOptions' settings stay",
               types.MessageType.Log)
        raw = {}
    return apply_raw(ls, raw)


def initialization_section(options) -> dict | None:
    """The settings in ``initializationOptions``: the ``mtmc`` section, or the options themselves."""
    if not isinstance(options, dict):
        return None
    raw = options.get(SECTION, options)
    return raw if isinstance(raw, dict) else None


def apply_raw(ls, raw: dict) -> bool:
    """Adopt the client's answer laid over the initializationOptions' settings (what it leaves out or
    answers null keeps their value, e.g. a debounce of 0); True when diagnostics must be recomputed."""
    if "trusted" in raw and not isinstance(raw["trusted"], bool):
        ls.log(f"ignored mtmc.trusted={raw['trusted']!r}: only true or false count", types.MessageType.Warning)
    settings = Settings.from_client(overlay(ls.initialization_settings, raw))
    changed = ls.apply_settings(settings)
    ls.log(f"settings: {settings.to_client()}", types.MessageType.Log)
    return changed


def settings_changed(ls) -> None:
    """Something diagnostics depend on changed (target, trust, compile diagnostics): refresh them."""
    ls.log(f"target GPU: {ls.target.summary()}")
    diagnostics.refresh_all(ls)
    refresh_code_lenses(ls)


def overlay(base: dict, answer: dict) -> dict:
    """``answer`` laid over ``base``, key by key (camelCase or snake_case alike) and into nested sections."""
    merged = {_camel(key): value for key, value in base.items()}
    for key, value in answer.items():
        key = _camel(key)
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = overlay(merged[key], value)
        else:
            merged[key] = value
    return merged


def _camel(key):
    return re.sub(r"_([a-z0-9])", lambda match: match.group(1).upper(), key) if isinstance(key, str) else key
