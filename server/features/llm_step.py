"""``mtmc.llmStep``: ask the LLM micro coder for one small step towards a goal, then apply it like a rule step.

The model (``optimizer.coder``: an OpenAI-compatible endpoint or a local GGUF, from the
``coderEndpoint`` / ``coderModel`` / ``coderModelPath`` settings) writes a diff in a worker thread
while a cancellable progress bar runs; the gate's refusal is shown as one warning and the document
is left alone. An accepted step is proposed, sent with ``workspace/applyEdit`` for the version it
was written for, and then recorded and verified by the same path as ``mtmc.applyCandidate``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ..app import MtmcLanguageServer
from ..arguments import command_args
from ..progress import JobProgress
from ..step_edits import apply_step_edit, record_applied, refuse

COMMAND = "mtmc.llmStep"
NO_CODER_MESSAGE = (
    "no LLM coder is configured: set mtmc.coderEndpoint to an OpenAI-compatible URL (e.g. http://localhost:8000/v1, "
    "with mtmc.coderModel naming the model it serves) or mtmc.coderModelPath to a local GGUF chat model "
    "(docs/coder.md). The embedded policy model is too small to write useful diffs."
)
UNTRUSTED_MESSAGE = (
    "the LLM coder is disabled while the workspace is not trusted: it sends the file to the configured model and "
    "its steps are verified by running the workspace's code. Trust the workspace to enable it."
)
# How often the event loop looks at the progress bar's cancel button while the model writes.
CANCEL_POLL_S = 0.1

# A local GGUF stays loaded between steps (loading takes seconds); llama.cpp's model is not
# thread-safe, so one local answer is generated at a time.
_local_chats: dict[str, object] = {}
_local_lock = threading.Lock()


def make_chat(settings):
    """The chat model the settings name (the endpoint wins over a local GGUF), else None."""
    from ...optimizer.coder import EndpointChat, LlamaChat

    if settings.coder_endpoint.strip():
        return EndpointChat(settings.coder_endpoint.strip(), model=settings.coder_model.strip())
    path = settings.coder_model_path.strip()
    if not path:
        return None
    key = os.path.expanduser(path)
    chat = _local_chats.get(key)
    if chat is None:
        _local_chats.clear()  # one local model in memory at a time
        chat = _local_chats[key] = LlamaChat(key)
    return chat


def _rewrite(coder, text: str, kernel: str, goal: str, target, file_name: str):
    """``LlmCoder.rewrite`` in a worker thread, one local model answer at a time."""
    from ...optimizer.coder import LlamaChat

    if isinstance(coder.chat, LlamaChat):
        with _local_lock:
            return coder.rewrite(text, kernel, goal, target, file_name)
    return coder.rewrite(text, kernel, goal, target, file_name)


def _refused(ls: MtmcLanguageServer, status: str, reason: str) -> dict:
    refuse(ls, f"no LLM step: {reason}")
    return {"applied": False, "status": status, "reason": reason}


def _stale(requested, current) -> str:
    return (f"the document changed since the step was asked for (version {requested}, now {current}); "
            "ask again on the current text")


async def _written(ls: MtmcLanguageServer, future, progress: JobProgress):
    """The worker's result, or None once the user pressed cancel (the late answer is dropped)."""
    while not future.done():
        if progress.cancel.is_set():
            # The HTTP request or generation cannot be interrupted; its result is simply not used.
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            return None
        await asyncio.wait({future}, timeout=CANCEL_POLL_S)
    return future.result()


def register(server) -> None:
    @server.command(COMMAND)
    async def llm_step(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, version, kernel, goal]: the model's step for ``goal`` on ``kernel``, applied for review."""
        from ...optimizer.coder import CoderError, LlmCoder

        uri, version, kernel, goal = command_args(args, "uri", "version", "kernel", "goal")
        if not isinstance(uri, str) or not isinstance(kernel, str) or not isinstance(goal, str):
            raise JsonRpcInvalidParams(f"{COMMAND} takes [uri, version, kernel, goal] with strings for uri, kernel and goal")
        if not ls.trusted:
            return _refused(ls, "untrusted", UNTRUSTED_MESSAGE)
        if ls.documents.get(uri) is None:
            return _refused(ls, "not_open", f"{uri} is not open in the editor")
        document = ls.workspace.get_text_document(uri)
        if version is not None and document.version != version:
            return _refused(ls, "stale", _stale(version, document.version))
        chat = make_chat(ls.settings)
        if chat is None:
            return _refused(ls, "no_coder", NO_CODER_MESSAGE)
        before, asked_version, target = document.source, document.version, ls.target
        file_name = Path(document.path).name if document.path else "kernel.py"
        coder = LlmCoder(chat)
        progress = await JobProgress(ls, f"MTMC: asking the LLM coder for a step on {kernel}").begin(
            f"{chat.describe()}: {goal}")
        outcome = "failed"
        try:
            future = asyncio.get_running_loop().run_in_executor(
                ls.step_executor, _rewrite, coder, before, kernel, goal, target, file_name)
            step = await _written(ls, future, progress)
            if step is None:
                outcome = "cancelled"
                ls.log(f"LLM step on {kernel} cancelled")
                return {"applied": False, "status": "cancelled", "reason": "cancelled"}
            outcome = f"{step.edit.changed_lines} lines changed"
        except CoderError as exc:
            outcome = "refused"
            return _refused(ls, "refused", str(exc))
        except Exception as exc:  # a bug must not look like the model's refusal
            ls.log(f"the LLM coder failed on {kernel}: {type(exc).__name__}: {exc}", types.MessageType.Error)
            return _refused(ls, "error", f"the LLM coder failed: {type(exc).__name__}: {exc}")
        finally:
            progress.end(outcome)
        now = ls.workspace.get_text_document(uri)
        if now.version != asked_version or now.source != before:
            return _refused(ls, "stale", _stale(asked_version, now.version))
        proposal = ls.steps.propose(uri, asked_version, step.candidate, before, step.edit)
        ls.log(f"LLM coder ({chat.describe()}) proposes {proposal.label}:\n{step.diff}", types.MessageType.Log)
        applied, reason = await apply_step_edit(ls, uri, proposal.label, before, step.edit.new_text, confirm=True,
                                                description=step.edit.summary)
        if not applied:  # declined in the preview, or the document moved on: the user's choice, no warning
            ls.log(f"{proposal.label} not applied: {reason}")
            return {"applied": False, "status": "declined", "reason": reason}
        return {"applied": True, "status": "applied", "coder": chat.describe(), "changedLines": step.edit.changed_lines,
                **record_applied(ls, uri, proposal.token)}
