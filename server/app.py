"""The MTMC language server object: settings, target, open documents and background executors."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import __version__
from ..optimizer.hardware import GpuProfile, resolve_target
from ..settings import Settings
from .positions import TextIndex
from .protocol import HardenedServerMixin, MtmcProtocol
from .ranking import Ranker
from .state import DocumentStore
from .steps import StepStore

logger = logging.getLogger(__name__)

SERVER_NAME = "mtmc-lsp"
# Line indexes kept for reuse: a few open documents' current and last-good texts.
INDEX_CACHE_SIZE = 8


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """What every handler and background job reads: settings, the resolved target, trust.

    Built once per change on the event loop and never mutated, so a job that took a snapshot keeps
    a consistent view while settings change underneath it.
    """

    settings: Settings
    target: GpuProfile
    trusted: bool

    @property
    def policy_settings(self) -> Settings:
        """The settings the policy is built from: an untrusted workspace contacts no endpoint and
        loads no model file named by settings (the source of the kernel would leave the machine)."""
        settings = self.settings
        if self.trusted or not (settings.policy == "endpoint" or settings.policy_model_path or settings.policy_adapter_path):
            return settings
        return dataclasses.replace(
            settings, policy="heuristic" if settings.policy == "endpoint" else settings.policy,
            policy_endpoint="", policy_model_path="", policy_adapter_path="",
        )

    @classmethod
    def build(cls, settings: Settings, previous: "ServerConfig | None", trusted: bool, log=None) -> "ServerConfig":
        """Resolve the target once (``resolve_target``, as the CLI does); reuse it when unchanged."""
        if previous is not None:
            return cls(settings, previous.target, trusted)
        try:
            target = resolve_target(settings.target_gpu)
        except KeyError as exc:
            if log is not None:
                log(f"{exc}; using the default target", types.MessageType.Warning)
            target = resolve_target("")
        return cls(settings, target, trusted)


class MtmcLanguageServer(HardenedServerMixin, LanguageServer):
    """pygls server plus the state every feature module shares."""

    def __init__(self) -> None:
        super().__init__(SERVER_NAME, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=MtmcProtocol)
        # Workspace Trust given at initialize (True, False, or None when not said); a server started
        # untrusted stays so (the editor restarts it when the user grants trust), whatever later
        # settings say.
        self.initial_trust: bool | None = None
        # True once the client's settings are known: answered by workspace/configuration, or given at
        # initialize to a client that has no workspace/configuration. A timed-out wait does not count.
        self.client_settings_known = False
        # The settings given in initializationOptions (raw): what workspace/configuration leaves out
        # or answers null keeps these values (server/settings_sync.py).
        self.initialization_settings: dict = {}
        # Settings, target and trust as one immutable snapshot, replaced on every change (ServerConfig).
        self.config = ServerConfig.build(Settings(), None, False)
        self.documents = DocumentStore()
        # One analysis at a time (newer versions supersede older ones), off the event loop.
        self.analysis_executor = ThreadPoolExecutor(1, thread_name_prefix="mtmc-analysis")
        # Compilation waits on subprocesses; one job at a time keeps the 2-core budget for typing.
        self.compile_executor = ThreadPoolExecutor(1, thread_name_prefix="mtmc-compile")
        # Step work (apply, verify, optimize): separate so a long verification never delays diagnostics.
        self.step_executor = ThreadPoolExecutor(2, thread_name_prefix="mtmc-steps")
        self.background_jobs = 0
        # Set on shutdown/exit: nothing is sent to the client any more (its pipe may be closed).
        self.closing = False
        # Running verifications and optimizations (JobProgress), cancelled on shutdown.
        self.active_jobs: set = set()
        self.ranker = Ranker()
        self.steps = StepStore(self.history_location, self.report_history_problem)
        self._model_watch: asyncio.Task | None = None
        # Set once the first settings arrived (initializationOptions or workspace/configuration):
        # diagnostics wait for it so the first ones are for the right target.
        self.settings_ready = asyncio.Event()
        self._indexes: list[TextIndex] = []

    # ---- configuration: settings, target, trust ------------------------------------------
    @property
    def settings(self) -> Settings:
        return self.config.settings

    @property
    def target(self) -> GpuProfile:
        """The GPU diagnostics, actions and verification are for (the ``targetGpu`` setting)."""
        return self.config.target

    @property
    def trusted(self) -> bool:
        """Whether the workspace's code may run: the client's settings are known and trust was said."""
        return self.config.trusted

    def reconfigure(self, settings: Settings | None = None, initial_trust: bool | None | object = ...,
                    settings_known: bool | None = None) -> bool:
        """Take new inputs and publish a new snapshot; True when something diagnostics depend on changed."""
        from .trust import is_trusted, stop_user_code

        old = self.config
        if initial_trust is not ...:
            self.initial_trust = initial_trust
        if settings_known is not None:
            self.client_settings_known = settings_known
        settings = settings or old.settings
        trusted = is_trusted(self.initial_trust, settings.trusted, self.client_settings_known)
        self.config = ServerConfig.build(settings, old if settings.target_gpu == old.settings.target_gpu else None,
                                         trusted, self.log)
        if old.trusted and not trusted:
            stop_user_code(self)
        return (old.target.key != self.config.target.key
                or settings.compile_diagnostics != old.settings.compile_diagnostics
                or trusted != old.trusted)

    @property
    def policy_settings(self) -> Settings:
        return self.config.policy_settings

    def apply_settings(self, settings: Settings) -> bool:
        """Adopt new settings; True when something diagnostics depend on changed."""
        old = self.settings
        changed = self.reconfigure(settings)
        if settings.problems and settings.problems != old.problems:
            self.report_settings_problems(settings.problems)
        return changed

    # ---- positions ----------------------------------------------------------------------
    @property
    def position_encoding(self) -> str:
        try:
            encoding = self.workspace.position_encoding or types.PositionEncodingKind.Utf16
        except RuntimeError:
            return types.PositionEncodingKind.Utf16
        return getattr(encoding, "value", encoding)

    def index(self, text: str) -> TextIndex:
        """The line index of ``text`` (the same few texts are indexed for every request: cached)."""
        encoding = self.position_encoding
        for cached in self._indexes:
            if cached.text is text and cached.encoding == encoding:
                return cached
        index = TextIndex(text, encoding)
        self._indexes = [index, *self._indexes[: INDEX_CACHE_SIZE - 1]]
        return index

    def forget_indexes(self, texts: list[str]) -> None:
        """Drop the cached line indexes of these texts (a closed document's: they hold its text)."""
        self._indexes = [index for index in self._indexes if not any(index.text is text for text in texts)]

    # ---- client capabilities ------------------------------------------------------------
    def client_supports(self, dotted: str, default: Any = False) -> Any:
        """A client capability by dotted snake_case path, e.g. ``workspace.configuration``."""
        value: Any = self.client_capabilities
        for part in dotted.split("."):
            value = getattr(value, part, None)
            if value is None:
                return default
        return value

    # ---- messages to the client ---------------------------------------------------------
    def log(self, message: str, level: types.MessageType = types.MessageType.Info) -> None:
        """``window/logMessage`` (the editor's output channel), mirrored to the server's own log."""
        logger.log(_PY_LEVELS.get(level, logging.INFO), "%s", message)
        if self.closing:
            return
        try:
            self.window_log_message(types.LogMessageParams(type=level, message=message))
        except Exception:  # no transport yet (before initialize) or the client went away
            logger.debug("could not send a log message", exc_info=True)

    @property
    def model_state(self) -> str:
        return self.ranker.model_state(self.policy_settings)

    def send_status(self) -> None:
        """``mtmc/status``: the target, the policy model's state, and the number of background jobs."""
        if self.closing:
            return
        self.protocol.notify(
            "mtmc/status", {"target": self.target.key, "model": self.model_state, "queue": self.background_jobs}
        )

    def history_location(self, uri: str) -> tuple[Path | None, Path]:
        """(workspace folder, document path) for a document's step history under ``.mtmc/``.

        The folder is None (the history stays in memory) for an untitled document and for a file
        outside every workspace folder: the server writes nothing beside it or in its own folder.
        """
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            return None, Path(parsed.path.rsplit("/", 1)[-1] or "untitled.py")
        document = Path(to_fs_path(uri) or parsed.path).absolute()
        try:
            folders = [Path(to_fs_path(f.uri) or "") for f in self.workspace.folders.values()]
            root = self.workspace.root_path
        except RuntimeError:
            folders, root = [], None
        for folder in folders + ([Path(root)] if root else []):
            if folder != Path("") and folder.is_absolute() and document.is_relative_to(folder):
                return folder, document
        return None, document

    def report_settings_problems(self, problems: list[str]) -> None:
        """Settings the editor sent that were not usable (each replaced by its default): one warning."""
        for problem in problems:
            logger.warning("setting %s", problem)
        if not self.closing:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning, message="MTMC: invalid settings: " + "; ".join(problems)))

    def report_history_problem(self, message: str) -> None:
        """A step history that was damaged (set aside) or cannot be saved: a warning the user sees."""
        logger.warning("%s", message)
        if not self.closing:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"MTMC: {message}"))

    def notify_steps_changed(self, uri: str) -> None:
        """``mtmc/stepsChanged``: the client re-reads ``mtmc.stepHistory`` for ``uri``."""
        if self.closing:
            return
        self.protocol.notify("mtmc/stepsChanged", {"uri": uri})

    def watch_model_loading(self) -> None:
        """While the policy model loads in the background, report "loading" and then its final state."""
        if self.model_state != "loading" or (self._model_watch is not None and not self._model_watch.done()):
            return

        async def watch() -> None:
            self.send_status()
            while self.model_state == "loading":
                await asyncio.sleep(0.5)
            self.log(f"policy: {self.ranker.describe(self.policy_settings)}")
            self.send_status()

        self._model_watch = asyncio.ensure_future(watch())

    def job_started(self) -> None:
        self.background_jobs += 1
        self.send_status()

    def job_finished(self) -> None:
        self.background_jobs = max(self.background_jobs - 1, 0)
        self.send_status()

    def report_server_error(self, error: Exception, source) -> None:
        """Log errors; show them in the editor only while the connection is up.

        (pygls reports a failed send by sending a message, which fails again once the client closed
        the pipe: that recursion would keep a closing server busy for many seconds.)
        """
        logger.error("%s: %s", getattr(source, "__name__", source), error)
        if self.closing or isinstance(error, (OSError, ValueError)):
            return
        super().report_server_error(error, source)

    def shutdown(self) -> None:
        self.closing = True
        for executor in (self.analysis_executor, self.compile_executor, self.step_executor):
            executor.shutdown(wait=False, cancel_futures=True)
        self.ranker.close()
        super().shutdown()


_PY_LEVELS = {
    types.MessageType.Error: logging.ERROR,
    types.MessageType.Warning: logging.WARNING,
    types.MessageType.Info: logging.INFO,
    types.MessageType.Log: logging.DEBUG,
}


def create_server() -> MtmcLanguageServer:
    """A server with every feature module registered."""
    from .features import register_all

    server = MtmcLanguageServer()
    register_all(server)
    return server
