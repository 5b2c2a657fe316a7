"""initialize / initialized / shutdown: settings from initializationOptions, then the first status."""

from __future__ import annotations

import os
import sys

from lsprotocol import types

from ... import __version__
from ...settings import Settings
from ..trust import trusted_from_options
from . import configuration


def settings_from_options(options) -> Settings | None:
    """``initializationOptions`` may hold the settings directly or under ``mtmc``."""
    if not isinstance(options, dict):
        return None
    raw = options.get("mtmc", options)
    return Settings.from_client(raw) if isinstance(raw, dict) else None


def register(server) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls, params: types.InitializeParams) -> None:
        ls.initially_trusted = trusted_from_options(params.initialization_options)
        settings = settings_from_options(params.initialization_options)
        if settings is not None:
            ls.apply_settings(settings)

    @server.feature(types.INITIALIZED)
    async def initialized(ls, params: types.InitializedParams) -> None:
        ls.log(
            f"MTMC language server {__version__} (pid {os.getpid()}, Python {sys.version.split()[0]}), "
            f"position encoding {ls.position_encoding}"
        )
        try:
            await configuration.pull_settings(ls)
        finally:
            ls.settings_ready.set()
        await configuration.register_for_changes(ls)
        ls.log(f"target GPU: {ls.target.summary()}")
        if not ls.trusted:
            ls.log("workspace not trusted: static analysis only (no compile diagnostics, verification or optimization)")
        ls.send_status()

    @server.feature(types.EXIT)
    def exit_(ls, params) -> None:
        ls.closing = True  # pygls closes the pipe next
        if ls._server is not None:  # TCP: stop listening too, so `mtmc serve --tcp` ends like stdio
            ls._server.close()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls, params) -> None:
        for state in ls.documents:
            state.cancel_jobs()
        for job in list(ls.active_jobs):
            job.cancel.set()  # verify/optimize workers are killed, their threads return
