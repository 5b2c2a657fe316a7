"""initialize / initialized / shutdown: settings from initializationOptions, then the first status."""

from __future__ import annotations

import os
import sys

from lsprotocol import types

from ... import __version__
from ...settings import Settings
from .. import settings_sync
from ..app import MtmcLanguageServer
from ..trust import invalid_trust_values, trust_from_options


def register(server) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: MtmcLanguageServer, params: types.InitializeParams) -> None:
        ls.reconfigure(initial_trust=trust_from_options(params.initialization_options))
        for value in invalid_trust_values(params.initialization_options):
            ls.log(f"ignored trusted={value} in initializationOptions: only true or false count", types.MessageType.Warning)
        raw = settings_sync.initialization_section(params.initialization_options)
        if raw is not None:
            ls.initialization_settings = raw  # later answers of workspace/configuration are laid over these
            ls.apply_settings(Settings.from_client(raw))
        if not ls.client_supports("workspace.configuration"):
            ls.reconfigure(settings_known=True)  # initializationOptions are all this client will say

    @server.feature(types.INITIALIZED)
    async def initialized(ls: MtmcLanguageServer, params: types.InitializedParams) -> None:
        ls.log(
            f"MTMC language server {__version__} (pid {os.getpid()}, Python {sys.version.split()[0]}), "
            f"position encoding {ls.position_encoding}"
        )
        was_trusted = ls.trusted
        try:
            await settings_sync.pull_settings(ls)
        finally:
            ls.reconfigure(settings_known=True)
            ls.settings_ready.set()
        await settings_sync.register_for_changes(ls)
        ls.log(f"target GPU: {ls.target.summary()}")
        if not ls.trusted:
            ls.log("workspace not trusted: static analysis only (no compile diagnostics, verification or optimization); "
                   "clients without Workspace Trust set mtmc.trusted = true for workspaces whose code may run")
        ls.send_status()
        if ls.trusted != was_trusted:  # settings answered after the diagnostics' wait: compile now
            settings_sync.settings_changed(ls)

    @server.feature(types.EXIT)
    def exit_(ls: MtmcLanguageServer, params) -> None:
        ls.closing = True  # pygls closes the pipe next
        if ls._server is not None:  # TCP: stop listening too, so `mtmc serve --tcp` ends like stdio
            ls._server.close()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: MtmcLanguageServer, params) -> None:
        for state in ls.documents:
            state.cancel_jobs()
        for job in list(ls.active_jobs):
            job.cancel.set()  # verify/optimize workers are killed, their threads return
