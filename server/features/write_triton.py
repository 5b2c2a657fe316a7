""""MTMC: Write a Triton version": a KernelBench-style PyTorch module -> ``<name>_triton.py`` beside it, opened.

Offered (as a refactor code action) on a file with ``class Model`` and ``get_inputs()`` and no
``ModelNew``. The command ``mtmc.writeTriton`` [uri] traces and lowers the module in a subprocess
(tracing builds the user's model, so it runs only in a trusted workspace and never in the server),
creates the file with a ``WorkspaceEdit`` (CreateFile + insert; written to disk when the client
cannot create files) and asks the client to show it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types

from ...optimizer.safe_exec import safe_module_argv
from ..app import MtmcLanguageServer
from ..trust import refuse_untrusted
from ..write_triton_offer import TITLE, WRITE_TRITON_COMMAND

GENERATE_TIMEOUT_S = 120.0


def triton_uri(uri: str) -> str:
    """``file:///a/b/model.py`` -> ``file:///a/b/model_triton.py``."""
    stem, _, _ = uri.rpartition(".py")
    return f"{stem}_triton.py"


async def generate_in_subprocess(text: str, name: str) -> dict:
    """The generated file (``text``, ``kernels``, ``fallbacks``) or ``error``, from a separate Python process."""
    proc = await asyncio.create_subprocess_exec(
        *safe_module_argv("mtmc_lsp.optimizer.kernelbench.write", name),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(text.encode("utf-8")), GENERATE_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return {"error": f"tracing the module took longer than {GENERATE_TIMEOUT_S:.0f} s"}
    lines = out.decode("utf-8", errors="replace").strip().splitlines()
    if not lines:
        return {"error": err.decode("utf-8", errors="replace")[-1000:] or f"exit {proc.returncode}"}
    return json.loads(lines[-1])


def _creates_files(ls: MtmcLanguageServer) -> bool:
    operations = ls.client_supports("workspace.workspace_edit.resource_operations", None) or []
    return types.ResourceOperationKind.Create in operations or "create" in operations


def register(server) -> None:
    @server.command(WRITE_TRITON_COMMAND)
    async def write_triton(ls: MtmcLanguageServer, *args) -> dict:
        """[uri]: write ``<name>_triton.py`` with naive Triton kernels for the module, and open it."""
        if not args or not isinstance(args[0], str):
            raise ValueError(f"{WRITE_TRITON_COMMAND} takes [uri]")
        uri = args[0]
        if not ls.trusted:
            return {"written": False, "message": refuse_untrusted(ls, TITLE)}
        document = ls.workspace.get_text_document(uri)
        name = Path(unquote(urlparse(uri).path)).stem
        result = await generate_in_subprocess(document.source, name)
        if "error" in result:
            message = f"MTMC: could not write a Triton version of {name}: {result['error']}"
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))
            return {"written": False, "message": message}
        target = triton_uri(uri)
        if _creates_files(ls):
            edit = types.WorkspaceEdit(document_changes=[
                types.CreateFile(uri=target, options=types.CreateFileOptions(overwrite=True)),
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=target, version=None),
                    edits=[types.TextEdit(range=types.Range(types.Position(0, 0), types.Position(0, 0)),
                                          new_text=result["text"])]),
            ])
            applied = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=TITLE))
            if not applied.applied:
                return {"written": False, "uri": target, "message": applied.failure_reason or "edit refused"}
        else:
            Path(unquote(urlparse(target).path)).write_text(result["text"], encoding="utf-8")
        if ls.client_supports("window.show_document.support", False):
            await ls.window_show_document_async(types.ShowDocumentParams(uri=target, take_focus=True))
        return {"written": True, "uri": target, "kernels": result["kernels"], "fallbacks": result["fallbacks"]}
