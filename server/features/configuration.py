"""workspace/didChangeConfiguration: take the new settings (pulled or pushed) and refresh once."""

from __future__ import annotations

from lsprotocol import types

from ..app import MtmcLanguageServer
from ..settings_sync import SECTION, apply_raw, pull_settings, settings_changed


def register(server) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: MtmcLanguageServer, params: types.DidChangeConfigurationParams) -> None:
        if ls.client_supports("workspace.configuration"):
            changed = await pull_settings(ls)
        else:  # push model: the settings come with the notification
            pushed = params.settings.get(SECTION, params.settings) if isinstance(params.settings, dict) else {}
            changed = apply_raw(ls, pushed if isinstance(pushed, dict) else {})
        ls.send_status()
        if changed:
            settings_changed(ls)
