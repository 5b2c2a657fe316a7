"""A byte-level LSP client for protocol tests: sends any frame (malformed ones too) and reads every reply.

pytest-lsp cannot send a wrong Content-Length or invalid JSON, so the hardening, fuzz and soak tests
talk to the server through this: the real ``python -m mtmc_lsp serve`` over pipes, or a server
running in a thread of the test process (``in_process``), whose state a test can then inspect.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SERVER_COMMAND = [sys.executable, "-m", "mtmc_lsp", "serve"]
SETTINGS = {
    "targetGpu": "h100", "diagnosticsDebounceMs": 0, "compileDiagnostics": False, "policy": "heuristic",
    "trusted": True, "verification": {"enabled": False},
}


_BREAK = re.compile(r"\r\n|\r|\n")


def offset_of(text: str, line: int, character: int) -> int:
    """A (line, UTF-16 character) position's code-point offset, clamped like editors do; written
    independently of the server's conversion (per character), so the tests compare two implementations."""
    start, found, end = 0, 0, len(text)
    for match in _BREAK.finditer(text):
        if found == line:
            end = match.start()
            break
        start, found = match.end(), found + 1
    else:
        if found < line:  # past the last line
            return len(text)
    units = 0
    for index in range(start, end):
        if units >= character:
            return index
        units += 2 if ord(text[index]) > 0xFFFF else 1
        if units > character:  # the position splits a surrogate pair: before the character
            return index
    return end


def replace_range(text: str, start: tuple[int, int], end: tuple[int, int], new_text: str) -> str:
    a, b = offset_of(text, *start), offset_of(text, *end)
    a, b = min(a, b), max(a, b)
    return text[:a] + new_text + text[b:]


TRACEBACK = re.compile(r'Traceback \(most recent call last\)|File "[^"]*", line \d+')


def carries_traceback(value) -> bool:
    """Whether any string in a JSON value (keys included) is or holds a Python traceback."""
    if isinstance(value, str):
        return bool(TRACEBACK.search(value)) or value.lower() == "traceback"
    if isinstance(value, dict):
        return any(carries_traceback(k) or carries_traceback(v) for k, v in value.items())
    if isinstance(value, list):
        return any(carries_traceback(v) for v in value)
    return False


LIST_TARGETS = {"command": "mtmc.listTargets", "arguments": []}


def request_body(msg_id: int, method: str = "workspace/executeCommand", params: Any = None) -> bytes:
    """A request's JSON body, unframed (``frame`` frames it; tests of broken framing frame it themselves)."""
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                       "params": LIST_TARGETS if params is None else params}).encode()


def frame(message: Any) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class RawClient:
    """Writes frames to a server and collects its messages (responses by id, notifications, requests)."""

    def __init__(self, write, read_stream, settings: dict | None = None):
        self._write = write
        self._read = read_stream
        self.settings = dict(SETTINGS if settings is None else settings)
        self.responses: dict[Any, dict] = {}
        self.null_id_errors: list[dict] = []
        self.notifications: list[dict] = []
        self.server_requests: list[dict] = []
        self._ids = itertools.count(1)
        self._lock = threading.Condition()
        self.closed = False
        # The editor's buffers: uri -> (text, version); workspace/applyEdit is applied to them like an
        # editor does (refused when its version is not the buffer's), and sent back as didChange.
        self.buffers: dict[str, tuple[str, int]] = {}
        self.applied_edits: list[dict] = []
        self.refused_edits: list[dict] = []
        self.on_apply_edit = self.apply_workspace_edit
        threading.Thread(target=self._reader, daemon=True).start()

    # ---- starting ----------------------------------------------------------------------------
    @classmethod
    def subprocess(cls, cwd: Path | None = None, settings: dict | None = None, env: dict | None = None) -> "RawClient":
        env = dict(os.environ if env is None else env,
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        process = subprocess.Popen(SERVER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, cwd=cwd or REPO, env=env)

        def write(data: bytes) -> None:
            process.stdin.write(data)
            process.stdin.flush()

        client = cls(write, process.stdout, settings)
        client.process = process
        return client

    @classmethod
    def in_process(cls, settings: dict | None = None) -> "RawClient":
        """A server (``create_server()``) in a thread of this process, over two pipes."""
        from mtmc_lsp.server.app import create_server

        to_server_r, to_server_w = os.pipe()
        from_server_r, from_server_w = os.pipe()
        server = create_server()
        server_in, server_out = os.fdopen(to_server_r, "rb"), os.fdopen(from_server_w, "wb")
        thread = threading.Thread(target=server.start_io, args=(server_in, server_out), daemon=True)
        thread.start()
        writer = os.fdopen(to_server_w, "wb")

        def write(data: bytes) -> None:
            writer.write(data)
            writer.flush()

        client = cls(write, os.fdopen(from_server_r, "rb"), settings)
        client.server, client.thread, client.process = server, thread, None
        return client

    def initialize(self, root: Path, capabilities: dict | None = None) -> dict:
        caps = capabilities if capabilities is not None else {
            "workspace": {"configuration": True, "applyEdit": True,
                          "workspaceEdit": {"documentChanges": True}},
            "textDocument": {"codeAction": {"resolveSupport": {"properties": ["edit"]},
                                            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["refactor", "quickfix"]}}}},
        }
        reply = self.call("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": caps,
                                         "workspaceFolders": [{"uri": root.as_uri(), "name": "ws"}],
                                         "initializationOptions": {"mtmc": self.settings}})
        self.notify("initialized", {})
        return reply

    # ---- documents ---------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.buffers[uri] = (text, version)
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                              "text": text}})

    def change(self, uri: str, start: tuple[int, int], end: tuple[int, int], new_text: str) -> int:
        """An incremental change of a (line, UTF-16 character) range; returns the new version."""
        text, version = self.buffers[uri]
        text = replace_range(text, start, end, new_text)
        self.buffers[uri] = (text, version + 1)
        self.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version + 1},
            "contentChanges": [{"range": {"start": {"line": start[0], "character": start[1]},
                                          "end": {"line": end[0], "character": end[1]}}, "text": new_text}]})
        return version + 1

    def close_document(self, uri: str) -> None:
        self.buffers.pop(uri, None)
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def apply_workspace_edit(self, params: dict) -> dict:
        """workspace/applyEdit as an editor does it: versioned edits against a moved-on buffer are refused."""
        edit = params["edit"]
        for change in edit.get("documentChanges") or []:
            uri, version = change["textDocument"]["uri"], change["textDocument"].get("version")
            current = self.buffers.get(uri)
            if current is None or (version is not None and version != current[1]):
                self.refused_edits.append(params)
                return {"applied": False, "failureReason": f"version {version} is not the buffer's"}
            text = current[0]
            for text_edit in sorted(change["edits"], key=lambda e: (e["range"]["start"]["line"],
                                                                    e["range"]["start"]["character"]), reverse=True):
                r = text_edit["range"]
                text = replace_range(text, (r["start"]["line"], r["start"]["character"]),
                                     (r["end"]["line"], r["end"]["character"]), text_edit["newText"])
            self.buffers[uri] = (text, current[1] + 1)
            self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": current[1] + 1},
                                                   "contentChanges": [{"text": text}]})
        self.applied_edits.append(params)
        return {"applied": True}

    # ---- sending -----------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self._write(data)

    def notify(self, method: str, params: Any = None) -> None:
        self.send_raw(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def request(self, method: str, params: Any = None) -> int:
        msg_id = next(self._ids)
        self.send_raw(frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}))
        return msg_id

    def call(self, method: str, params: Any = None, timeout: float = 30.0) -> dict:
        return self.wait(self.request(method, params), timeout)

    def wait(self, msg_id, timeout: float = 30.0) -> dict:
        """The response to ``msg_id`` (the whole message: ``result`` or ``error``)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while msg_id not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError(f"no response to request {msg_id}")
                self._lock.wait(left)
            return self.responses.pop(msg_id)

    def wait_for(self, predicate, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def alive(self, timeout: float = 10.0) -> bool:
        """The server still answers (a cheap request round-trip)."""
        try:
            reply = self.call("workspace/executeCommand", {"command": "mtmc.listTargets", "arguments": []}, timeout)
        except TimeoutError:
            return False
        return "result" in reply

    def close(self) -> None:
        try:
            self.call("shutdown", None, timeout=10)
            self.notify("exit")
        except (OSError, TimeoutError, ValueError):
            pass
        if getattr(self, "process", None) is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if getattr(self, "thread", None) is not None:
            self.thread.join(timeout=10)

    # ---- reading -----------------------------------------------------------------------------
    def _reader(self) -> None:
        stream = self._read
        try:
            while True:
                length = None
                while True:
                    line = stream.readline()
                    if not line:
                        return
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                    elif line in (b"\r\n", b"\n"):
                        break
                message = json.loads(stream.read(length))
                self._received(message)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self.closed = True
                self._lock.notify_all()

    def _received(self, message: dict) -> None:
        if "method" in message and "id" in message:
            self.server_requests.append(message)
            self.send_raw(frame({"jsonrpc": "2.0", "id": message["id"], "result": self._answer(message)}))
            return
        with self._lock:
            if "method" in message:
                self.notifications.append(message)
            elif message.get("id") is None:
                self.null_id_errors.append(message)
            else:
                self.responses[message["id"]] = message
            self._lock.notify_all()

    def _answer(self, request: dict) -> Any:
        method = request["method"]
        if method == "workspace/configuration":
            return [self.settings for _ in request["params"]["items"]]
        if method == "workspace/applyEdit":
            return self.on_apply_edit(request["params"])
        return None
