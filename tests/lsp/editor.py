"""A pytest-lsp client that behaves like an editor: tracks its buffers, applies workspace edits."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, Union

from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "mtmc_lsp" / "examples"
SERVER_COMMAND = [sys.executable, "-m", "mtmc_lsp", "serve"]
CLIENTS = ["visual-studio-code", "neovim"]
# A file whose launch (num_warps=6) is an MTMC105 error the static checks always report.
PLANTED = '''import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def scale(x):
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024, num_warps=6)
'''


class EditorClient(LanguageClient):
    """Test client with buffers, versioned diagnostics and a real ``workspace/applyEdit``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.buffers: dict[str, tuple[str, int]] = {}
        self.published: list[types.PublishDiagnosticsParams] = []
        self.statuses: list[dict] = []
        self.steps_changed: list[dict] = []
        self.applied_edits: list[types.ApplyWorkspaceEditParams] = []
        self.code_lens_refreshes = 0
        self.message_requests: list[types.ShowMessageRequestParams] = []
        self.configuration_requests = 0
        self.message_answer: str | None = None  # the action a window/showMessageRequest gets (None: the first)
        self._published_event = asyncio.Event()

    # ---- buffers ------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.buffers[uri] = (text, version)
        self.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        ))

    def edit(self, uri: str, start: tuple[int, int], end: tuple[int, int], new_text: str) -> int:
        """Replace a (line, character) range with an incremental change; returns the new version."""
        text, version = self.buffers[uri]
        text = apply_text_edits(text, [types.TextEdit(range=_range(start, end), new_text=new_text)])
        version += 1
        self.buffers[uri] = (text, version)
        self.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=_range(start, end), text=new_text)],
        ))
        return version

    def replace_all(self, uri: str, new_text: str) -> int:
        text, version = self.buffers[uri]
        lines = text.split("\n")
        return self.edit(uri, (0, 0), (len(lines) - 1, len(lines[-1])), new_text)

    def buffer_text(self, uri: str) -> str:
        return self.buffers[uri][0]

    def buffer_version(self, uri: str) -> int:
        return self.buffers[uri][1]

    # ---- waiting ------------------------------------------------------------------------
    async def diagnostics_for(self, uri: str, version: int | None = None, timeout: float = 30.0,
                              predicate=None) -> list[types.Diagnostic]:
        """The first published diagnostics for ``uri`` (at ``version``) that satisfy ``predicate``."""
        async def wait():
            seen = 0
            while True:
                for params in self.published[seen:]:
                    if params.uri == uri and (version is None or params.version == version):
                        if predicate is None or predicate(list(params.diagnostics)):
                            return list(params.diagnostics)
                seen = len(self.published)
                self._published_event.clear()
                await self._published_event.wait()

        return await asyncio.wait_for(wait(), timeout)


def position_of(text: str, needle: str, delta: int = 0) -> types.Position:
    """The LSP position of ``needle`` in ``text`` (plus ``delta`` characters; ASCII text)."""
    offset = text.index(needle) + delta
    return types.Position(line=text.count("\n", 0, offset), character=offset - text.rfind("\n", 0, offset) - 1)


async def code_actions(client, uri, position, diagnostics=(), only=None):
    """The code actions at ``position`` (an empty list when the server returns none)."""
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=list(diagnostics), only=only),
    )) or []


async def execute_command(client, name, *args):
    """``workspace/executeCommand`` with positional arguments."""
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=name, arguments=list(args)))


async def settled_steps(client, uri, count: int, timeout: float = 10) -> list[dict]:
    """The step history once it has ``count`` steps whose verification finished."""
    async def poll():
        while True:
            steps = (await execute_command(client, "mtmc.stepHistory", uri))["steps"]
            if len(steps) >= count and all((s["verification"] or {}).get("state") not in (None, "pending", "running")
                                           for s in steps):
                return steps
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(poll(), timeout)


def _range(start: tuple[int, int], end: tuple[int, int]) -> types.Range:
    return types.Range(start=types.Position(line=start[0], character=start[1]),
                       end=types.Position(line=end[0], character=end[1]))


def _offset(text: str, position: types.Position) -> int:
    """UTF-16 position -> string offset (the test files are ASCII or BMP-only)."""
    lines = text.split("\n")
    line = min(position.line, len(lines) - 1)
    return sum(len(l) + 1 for l in lines[:line]) + min(position.character, len(lines[line]))


def apply_text_edits(text: str, edits) -> str:
    """Apply non-overlapping text edits, last first, as an editor does."""
    spans = sorted(((_offset(text, e.range.start), _offset(text, e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def _apply_edit(client: EditorClient, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
    client.applied_edits.append(params)
    return apply_workspace_edit(client, params.edit)


def apply_workspace_edit(client: EditorClient, edit: types.WorkspaceEdit) -> types.ApplyWorkspaceEditResult:
    """Apply a workspace edit to the client's buffers (all or nothing) and tell the server."""
    changes: list[tuple[str, int | None, list]] = []
    for change in edit.document_changes or []:
        if isinstance(change, types.TextDocumentEdit):
            changes.append((change.text_document.uri, change.text_document.version, list(change.edits)))
    for uri, edits in (edit.changes or {}).items():
        changes.append((uri, None, list(edits)))
    for uri, version, _ in changes:  # all or nothing, like VS Code
        if uri not in client.buffers:
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"{uri} is not open")
        if version is not None and version != client.buffer_version(uri):
            return types.ApplyWorkspaceEditResult(
                applied=False, failure_reason=f"version {version} of {uri} is stale (now {client.buffer_version(uri)})"
            )
    for uri, _, edits in changes:
        text, version = client.buffers[uri]
        new_text = apply_text_edits(text, [e for e in edits])
        lines = text.split("\n")
        client.buffers[uri] = (new_text, version + 1)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version + 1),
            content_changes=[types.TextDocumentContentChangePartial(
                range=_range((0, 0), (len(lines) - 1, len(lines[-1]))), text=new_text)],
        ))
    return types.ApplyWorkspaceEditResult(applied=True)


def _publish(client: EditorClient, params: types.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.append(params)
    client._published_event.set()


def _show_message_request(client: EditorClient, params: types.ShowMessageRequestParams):
    """Answer with ``client.message_answer`` (the first action by default), and remember the question."""
    client.message_requests.append(params)
    titles = [a.title for a in params.actions or []]
    wanted = client.message_answer if client.message_answer is not None else (titles[0] if titles else None)
    return types.MessageActionItem(title=wanted) if wanted in titles else None


def _configuration(client: EditorClient, params: types.ConfigurationParams):
    """pytest-lsp's answer from ``set_configuration``, counted (a settings change is one round trip)."""
    client.configuration_requests += 1
    return [client.get_configuration(section=item.section, scope_uri=item.scope_uri) for item in params.items]


def _register_capability(client: EditorClient, params: types.RegistrationParams) -> None:
    return None


def _code_lens_refresh(client: EditorClient, params: Any) -> None:
    client.code_lens_refreshes += 1


def as_dict(value: Any) -> Any:
    """pygls hands untyped JSON objects over as namedtuples; turn them back into dicts."""
    if hasattr(value, "_asdict"):
        return {k: as_dict(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [as_dict(v) for v in value]
    return value


def _status(client: EditorClient, params: Any) -> None:
    client.statuses.append(as_dict(params))


def _steps_changed(client: EditorClient, params: Any) -> None:
    client.steps_changed.append(as_dict(params))


def _converter():
    """pygls' converter, with lsprotocol's Command | CodeAction hook fixed.

    lsprotocol 2025.0.0 reads any object with a ``command`` key as a Command, so a CodeAction that
    carries a command (as the spec allows) would arrive as a Command; a Command's ``command`` is a
    string, a CodeAction's is an object.
    """
    converter = default_converter()

    def code_action_or_command(obj, _):
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, types.Command)
        return converter.structure(obj, types.CodeAction)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], code_action_or_command)
    return converter


def make_editor_client(overrides: dict | None = None) -> EditorClient:
    """The editor client; ``overrides`` replaces handlers by method name (a late configuration answer)."""
    client = EditorClient(converter_factory=_converter)
    features = dict(DEFAULT_CLIENT_FEATURES)
    features.update({
        types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _publish,
        types.WORKSPACE_APPLY_EDIT: _apply_edit,
        types.CLIENT_REGISTER_CAPABILITY: _register_capability,
        types.WINDOW_SHOW_MESSAGE_REQUEST: _show_message_request,
        types.WORKSPACE_CONFIGURATION: _configuration,
        types.WORKSPACE_CODE_LENS_REFRESH: _code_lens_refresh,
        "mtmc/status": _status,
        "mtmc/stepsChanged": _steps_changed,
        **(overrides or {}),
    })
    register_lsp_features(client, features)
    return client


CONFIG = ClientServerConfig(server_command=SERVER_COMMAND, client_factory=make_editor_client)


def initialize_params(client_name: str, root: Path, settings: dict | None = None) -> types.InitializeParams:
    capabilities = client_capabilities(client_name)
    return types.InitializeParams(
        capabilities=capabilities,
        root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
    )
