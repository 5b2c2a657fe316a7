"""JSON-RPC hardening around pygls 2.x: framing limits and recovery, -32700/-32600/-32602/-32002 replies.

pygls reads ``Content-Length`` frames in ``pygls.io_.run_async`` with no limit on the length (a
``Content-Length: 1000000000000`` ends the process), no recovery when a length is a few bytes off
(the stream stays out of step and the server goes silent), and it parses the body with the message
types as ``json.loads`` object hooks, so a request whose params do not fit its type (``"position":
"x"``) raises out of the parser and is never answered; invalid JSON gets no -32700 either. It also
serves requests before ``initialize``, drops requests after ``shutdown`` without a reply, and keeps
the document text with ``str.splitlines`` (which knows more line breaks than LSP) and a per-character
Python loop for positions (seconds per edit on a 5 MB line).

This module replaces the reading loop (``serve``, splitting frames with ``framing.FrameReader``, which
resynchronises after a wrong ``Content-Length``) and subclasses the protocol
(``MtmcProtocol``) and the workspace documents (``FastTextDocument``); ``MtmcLanguageServer`` uses
them through ``HardenedServerMixin``. Nothing here changes what a well-formed session sees.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable
from urllib.parse import unquote

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.workspace import TextDocument, Workspace

from .framing import INVALID_REQUEST, STALL_S, Frame, FrameReader
from .positions import TextIndex
from .scratch import ScratchSpace
from .seen_texts import SeenTexts

logger = logging.getLogger(__name__)

READ_CHUNK = 1 << 16

# JSON-RPC 2.0 and LSP error codes.
INVALID_PARAMS, INTERNAL_ERROR = -32602, -32603
SERVER_NOT_INITIALIZED = -32002


class FastTextDocument(TextDocument):
    """pygls' document with LSP line breaks only and positions converted in C (bytes), not per character."""

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        source = self.source
        index = TextIndex(source, self._position_codec.encoding or types.PositionEncodingKind.Utf16)
        start, end = index.offset_at(change.range.start), index.offset_at(change.range.end)
        if end < start:  # a reversed range: LSP ranges are ordered, but be lenient like editors are
            start, end = end, start
        self._source = source[:start] + change.text + source[end:]


class FastWorkspace(Workspace):
    """A workspace whose documents are ``FastTextDocument``; changes to a document that is not open are ignored."""

    def _create_text_document(self, doc_uri, source=None, version=None, language_id=None):
        return FastTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                                sync_kind=self._sync_kind, position_codec=self._position_codec)


class MtmcProtocol(LanguageServerProtocol):
    """pygls' LSP protocol plus lifecycle rules (no requests before initialize or after shutdown)."""

    def __init__(self, server, converter):
        super().__init__(server, converter)
        self.initialize_received = False
        # Framing problems and recovered messages seen so far (the soak and fuzz reports count them).
        self.problems = 0
        # Every text the editor sent for a document in this session: a verification's baseline from
        # the workspace's step history must be one of them (server/seen_texts.py).
        self.seen_texts = SeenTexts()

    # ---- bookkeeping --------------------------------------------------------------------------
    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        """pygls keeps the future of every generator or async handler in ``_request_futures`` and
        removes it only when a request is answered: every didOpen/didChange/didClose (generator
        handlers) left one behind, about 7 KB of RSS per edit in a 10,000-edit soak. Finished ones
        are dropped here (not in a done-callback: pygls' shutdown cancels while iterating the dict)."""
        for key, future in list(self._request_futures.items()):  # list(): one atomic copy
            if future.done():
                self._request_futures.pop(key, None)
        return super()._execute_handler(msg_id, handler, callback, args, kwargs)

    # ---- workspace ----------------------------------------------------------------------------
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        generator = super().lsp_initialize(params)
        try:
            request = next(generator)  # pygls has created the workspace by its first yield
        except StopIteration as stop:
            self._upgrade_workspace()
            return stop.value
        self._upgrade_workspace()
        while True:
            value = yield request
            try:
                request = generator.send(value)
            except StopIteration as stop:
                return stop.value

    def _upgrade_workspace(self) -> None:
        if self._workspace is not None and type(self._workspace) is Workspace:
            self._workspace.__class__ = FastWorkspace

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        self.seen_texts.saw(params.text_document.uri, params.text_document.text)
        result = yield from super().lsp_text_document__did_open(params)
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        if unquote(uri) not in self.workspace.text_documents:
            # pygls raises KeyError here, which the editor shows as an error popup.
            logger.warning("didChange for %s, which is not open: ignored", uri)
            return None
        result = yield from super().lsp_text_document__did_change(params)
        self.seen_texts.changed(uri, self.workspace.get_text_document(uri).source)
        return result

    # ---- messages -----------------------------------------------------------------------------
    def reply_error(self, msg_id, code: int, message: str) -> None:
        """A JSON-RPC error response (``msg_id`` None for a message whose id is unknown)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": without_traceback(message)}})

    def _send_response(self, msg_id, result=None, error: types.ResponseError | None = None):
        """pygls answers a handler's unexpected exception with -32603 whose ``data`` holds the Python
        traceback (``JsonRpcInternalError.of``): it goes to the server's log, the client gets one line."""
        if error is not None:
            error = client_safe_error(error, msg_id)
        super()._send_response(msg_id, result, error)

    def dispatch(self, frame: Frame) -> None:
        """Check one decoded message (envelope, lifecycle, params) and hand it to pygls."""
        if not frame.ok:
            self.problems += 1
            logger.warning("JSON-RPC: %s", frame.problem)
            if frame.error_code is not None:
                self.reply_error(None, frame.error_code, frame.problem)
            return
        if frame.note:
            self.problems += 1
            self._warn(f"a message from the editor was recovered: {frame.note}")
        data = frame.message
        if not isinstance(data, dict):
            self.reply_error(None, INVALID_REQUEST, f"not a JSON-RPC message (a JSON {type(data).__name__})")
            return
        has_id, method = "id" in data, data.get("method")
        msg_id = data.get("id")
        valid_id = msg_id is None or (isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool))
        if data.get("jsonrpc") != "2.0" or not valid_id or ("method" in data and not isinstance(method, str)):
            if has_id and "method" in data:
                self.reply_error(msg_id if valid_id else None, INVALID_REQUEST, "not a JSON-RPC 2.0 request")
            else:
                logger.warning("JSON-RPC: ignored an invalid message %.200s", data)
            return
        is_request = has_id and method is not None
        if method is not None and not self._lifecycle_allows(method, msg_id if is_request else None, is_request):
            return
        try:
            message = self.structure_message(data)
        except Exception as exc:  # noqa: BLE001 - any params that do not fit the method's type
            reason = f"invalid params for {method}: {_short(exc)}"
            if is_request:
                self.reply_error(msg_id, INVALID_PARAMS, reason)
            elif method is not None:
                self._warn(f"ignored a notification with {reason}"
                           + (" - the document may now differ from the editor's" if method.startswith("textDocument/did") else ""))
            else:
                logger.warning("JSON-RPC: ignored a response: %s", reason)
            return
        if is_request and method == types.INITIALIZE:
            self.initialize_received = True
        try:
            self.handle_message(message)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - pygls raised before it could reply
            logger.exception("JSON-RPC: failed to handle %s", method)
            if is_request:
                self.reply_error(msg_id, INTERNAL_ERROR, f"{method} failed: {_short(exc)}")

    def _lifecycle_allows(self, method: str, msg_id, is_request: bool) -> bool:
        if method == types.EXIT:
            return True
        if self._shutdown:
            if is_request:
                self.reply_error(msg_id, INVALID_REQUEST, f"{method}: the server is shutting down")
            return False
        if method == types.INITIALIZE:
            if self.initialize_received and is_request:
                self.reply_error(msg_id, INVALID_REQUEST, "initialize was already called")
                return False
            return True
        if not self.initialize_received:
            if is_request:
                self.reply_error(msg_id, SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized")
            return False  # notifications before initialize are dropped (LSP)
        return True

    def _warn(self, message: str) -> None:
        logger.warning("%s", message)
        if self.initialize_received and not self._shutdown:
            try:
                self.notify(types.WINDOW_LOG_MESSAGE,
                            types.LogMessageParams(type=types.MessageType.Warning, message=f"MTMC: {message}"))
            except Exception:  # noqa: BLE001 - the pipe may be gone
                logger.debug("could not send a warning", exc_info=True)


# A Python traceback's header, or one of its frame lines (also what a SyntaxError's text starts with).
_TRACEBACK_LINE = re.compile(r'^\s*(Traceback \(most recent call last\)|File "[^"]*", line \d+)')


def without_traceback(message: str) -> str:
    """``message`` without Python traceback lines (and the code and caret lines under them), on one line."""
    if "\n" not in message and not _TRACEBACK_LINE.match(message):
        return message
    kept, in_traceback = [], False
    for line in message.splitlines():
        if _TRACEBACK_LINE.match(line):
            in_traceback = True
        elif in_traceback and (line.startswith((" ", "\t")) or not line.strip()):
            continue  # the source line or the caret under a frame line
        else:
            in_traceback = False
            if line.strip():
                kept.append(line.strip())
    return " ".join(kept) or "internal error (details in the server's log)"


def client_safe_error(error: types.ResponseError, msg_id=None) -> types.ResponseError:
    """``error`` as the client may see it: no traceback in its message or data (logged instead)."""
    message, data = without_traceback(error.message), error.data
    data_has_traceback = data is not None and any(
        text.lower() == "traceback" or any(_TRACEBACK_LINE.match(line) for line in text.splitlines())
        for text in _strings(data))
    if message == error.message and not data_has_traceback:
        return error
    logger.warning("JSON-RPC: error %s for request %s sent without its traceback: %s %s",
                   error.code, msg_id, error.message, data)
    return types.ResponseError(code=error.code, message=message, data=None if data_has_traceback else data)


def _strings(value, depth: int = 0):
    """Every string inside a JSON-like value (the keys too)."""
    if depth > 20:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item, depth + 1)


def _short(exc: BaseException) -> str:
    """One line saying what was wrong; cattrs' validation errors name the fields (``$.params.range``)."""
    cause = exc.__cause__ or exc
    try:
        from cattrs import transform_error
        from cattrs.errors import ClassValidationError

        if isinstance(cause, ClassValidationError):
            return "; ".join(transform_error(cause, path="$"))[:300]
    except ImportError:
        pass
    text = str(cause) or type(cause).__name__
    return text.replace("\n", " ")[:300]


async def serve(stop_event: threading.Event, read_chunk: Callable[[], Awaitable[bytes]], protocol: MtmcProtocol) -> None:
    """The message loop: read chunks, split them into frames, dispatch; ends at end of input or exit."""
    frames = FrameReader()
    pending: asyncio.Future | None = None
    while not stop_event.is_set():
        if pending is None:
            pending = asyncio.ensure_future(read_chunk())
        done, _ = await asyncio.wait({pending}, timeout=STALL_S if frames.waiting_for_body else None)
        if not done:
            stalled = frames.stalled()
            if stalled is not None:
                protocol.dispatch(stalled)
            continue
        chunk, pending = pending.result(), None
        if not chunk:
            break
        frames.feed(chunk)
        for frame in frames.frames():
            protocol.dispatch(frame)
            await asyncio.sleep(0)  # let replies and other tasks run between messages of a big chunk


class HardenedServerMixin:
    """``start_io`` / ``start_tcp`` with ``serve`` instead of pygls' reading loop."""

    def _start_io_async(self, stdin=None, stdout=None):
        from pygls.io_ import StdoutWriter

        self._stop_event = threading.Event()
        source = stdin or sys.stdin.buffer
        read = getattr(source, "read1", None) or source.read
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        # Its own thread: a read blocks until the editor writes, and must not take a pool worker.
        reader = ThreadPoolExecutor(1, thread_name_prefix="mtmc-stdin")
        scratch = ScratchSpace()
        scratch.enter()

        async def read_chunk() -> bytes:
            return await asyncio.get_running_loop().run_in_executor(reader, read, READ_CHUNK)

        try:
            asyncio.run(serve(self._stop_event, read_chunk, self.protocol))
        except BrokenPipeError:
            logger.error("Connection to the client is lost! Shutting down the server.")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            reader.shutdown(wait=False, cancel_futures=True)
            self.shutdown()
            scratch.leave()

    def start_tcp(self, host: str, port: int) -> None:
        self._stop_event = stop_event = threading.Event()

        async def connection(stream_reader: asyncio.StreamReader, stream_writer: asyncio.StreamWriter):
            self.protocol.set_writer(stream_writer)
            await serve(stop_event, lambda: stream_reader.read(READ_CHUNK), self.protocol)
            self.shutdown()

        async def tcp_server():
            self._server = await asyncio.start_server(connection, host, port)
            async with self._server:
                await self._server.serve_forever()

        scratch = ScratchSpace()
        scratch.enter()
        try:
            asyncio.run(tcp_server())
        except asyncio.CancelledError:
            logger.debug("TCP server cancelled")
        finally:
            scratch.leave()
