"""LSP base-protocol framing that resynchronises: bytes in, JSON-RPC messages or framing problems out.

``FrameReader`` is fed what the editor writes and yields one ``Frame`` per message or problem. A
wrong ``Content-Length`` costs at most the broken frame, never a later one, by one fact: a JSON text
cannot hold a header line. Raw CR/LF are not allowed inside a JSON string and ``Content-Length`` is
no JSON token outside one, so the rules for a declared body are:

1. A header line (``Content-Length: <digits>\\r\\n``) in the bytes of a body, complete or still
   arriving, proves the length wrong: the body ends where that header block starts and reading goes
   on at the header, at once (no timer). This ends every wait for a length too large, by 200 bytes
   or by 100,000, as soon as the next message's header line has arrived.
2. A body that is not JSON but starts with a whole JSON object: the object is the message, the
   rest is read as what follows it (a length a few bytes too large, the next header cut in two).
3. While waiting for the rest of a body: when the bytes already there are a whole JSON object
   (anything after it can only be whitespace for the length to be right, or is already a
   contradiction), the object is taken after ``STALL_S`` without a byte. That is the only timed
   rule, and it cannot change what a well-formed stream means: a complete JSON value stays the same
   message, and what could still come (whitespace) is skipped before the next header. An incomplete
   JSON prefix is waited for without a limit: a big message on a slow pipe is legitimate, and rule 1
   ends the wait the moment a next header arrives.
4. A length too small leaves a body that is not JSON: one -32700 reply; the rest of it is skipped up
   to the next header without a second report.

Header blocks: a block ends at the first blank line; its header lines are the run of ``Name: value``
lines before the blank line, or start at a well-formed ``Content-Length: <digits>``/``Content-Type:``
glued to other bytes on a line (the tail of a body cut short runs into the next header without a
line break; the text ``"Content-Length: 12"}`` of such a tail is not well formed). A block without
a valid ``Content-Length`` is an Invalid Request (-32600, id null) and the body after it is skipped up
to the next header (a ``Name: value`` block inside that skipped body is not answered twice); a length
over the limit is refused the same way, without reading its body. Other bytes before a header are
skipped with a log line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# A 5 MB source file is about 5-10 MB of JSON; larger frames are refused without reading them.
MAX_CONTENT_LENGTH = 64 << 20
# Header blocks are a line or two; more than this without a blank line is not a header.
MAX_HEADER_BYTES = 8 << 10
# Rule 3 above: a body whose bytes form a whole JSON object is taken after this long without a byte.
STALL_S = 0.5

# JSON-RPC 2.0 error codes for framing problems.
PARSE_ERROR, INVALID_REQUEST = -32700, -32600

# Rule 1: a complete Content-Length header line; it cannot occur inside a JSON text.
_HEADER_LINE_IN_BODY = re.compile(rb"content-length[ \t]{0,64}:[ \t]{0,64}\d{1,18}[ \t]{0,64}\r\n", re.IGNORECASE)
# The longest such line, and so how far back a scan of a growing body restarts (a line cut by a read).
_HEADER_LINE_MAX = 256
# The header names LSP defines; the last one on a line starts the header (bytes before it are glued garbage).
_KNOWN_NAME = re.compile(rb"content-(?:length|type)[ \t]*:", re.IGNORECASE)
# A header line glued to other bytes counts only when well formed (not the text '"Content-Length: 12"}' of a body).
_WELL_FORMED_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*\d{1,18}[ \t]*|content-type[ \t]*:[^\r\n]*", re.IGNORECASE)
_GENERIC_HEADER_LINE = re.compile(rb"[A-Za-z0-9!#$%&'*+.^_`|~-]+[ \t]*:[^\r\n]*")


@dataclass
class Frame:
    """One thing read from the stream: a decoded message, or a framing/parse problem."""

    message: Any = None
    # Set for problems: the JSON-RPC error code the client is told (None: only logged).
    error_code: int | None = None
    problem: str = ""
    # The message was recovered from a frame whose Content-Length was wrong, or held invalid UTF-8.
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


class FrameReader:
    """Splits a byte stream into JSON-RPC messages and resynchronises after broken framing (module docstring).

    ``feed`` bytes, then iterate ``frames()``; call ``stalled()`` when no bytes came for ``STALL_S``
    while ``waiting_for_body``.
    """

    def __init__(self, max_content_length: int = MAX_CONTENT_LENGTH, max_header_bytes: int = MAX_HEADER_BYTES):
        self.max_content_length = max_content_length
        self.max_header_bytes = max_header_bytes
        self._buffer = bytearray()
        self._pending: int | None = None  # the declared body length being read
        self._scanned = 0  # how far the pending body was searched for a header line (rule 1)
        self._stall_checked = -1  # the buffer length stalled() last parsed
        # After a refused header: its body is skipped up to the next header without another report.
        self._discarding = False

    @property
    def waiting_for_body(self) -> bool:
        return self._pending is not None

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def frames(self):
        while True:
            frame = self._next()
            if frame is None:
                return
            yield frame

    def stalled(self) -> Frame | None:
        """Rule 3: no bytes came for a while in the middle of a body; take a whole JSON object if one is there."""
        if self._pending is None or len(self._buffer) == self._stall_checked:
            return None  # nothing came since the last look: the same bytes are not parsed again
        self._stall_checked = len(self._buffer)
        window = bytes(self._buffer[: self._pending])
        end = _json_object_end(window)
        if end is None:
            return None  # really incomplete: keep waiting (a large message on a slow pipe)
        declared = self._end_body(end)
        return _message_frame(window[:end], f"Content-Length said {declared} bytes, the message had {end}")

    # ---- reading --------------------------------------------------------------------------------
    def _next(self) -> Frame | None:
        return self._read_header() if self._pending is None else self._read_body()

    def _read_header(self) -> Frame | None:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) <= self.max_header_bytes:
                    return None
                dropped = len(buffer) - _HEADER_LINE_MAX  # keep a tail: it may be the start of a header
                del buffer[:dropped]
                frame = self._skipped(f"skipped {dropped} bytes without a header")
                if frame is not None:
                    return frame
                continue
            block = bytes(buffer[:end])
            del buffer[: end + 4]
            start = _header_start(block)
            garbage, header = block[:start], block[start:]
            if not header:
                frame = self._skipped(f"skipped {len(block) + 4} bytes that were not a header: {block[:40]!r}")
                if frame is not None:
                    return frame
                continue
            if self._discarding and not _KNOWN_NAME.match(header):
                # A "Name: value" line inside the skipped body of a broken frame: no second reply.
                return Frame(problem=f"skipped {len(block) + 4} bytes of a broken frame: {block[:40]!r}")
            discarding, self._discarding = self._discarding, False
            length, problem = self._content_length(header)
            if problem:
                self._discarding = True
                return Frame(error_code=INVALID_REQUEST, problem=problem)
            self._pending, self._scanned = length, 0
            if garbage.strip() and not discarding:
                return Frame(problem=f"skipped {len(garbage)} bytes before a header: {garbage[:40]!r}")
            return self._read_body()

    def _skipped(self, problem: str) -> Frame | None:
        """A log-only problem for skipped bytes (none while skipping a refused frame's body, or for whitespace)."""
        if self._discarding or not problem:
            return None
        return Frame(problem=problem)

    def _read_body(self) -> Frame | None:
        buffer, declared = self._buffer, self._pending
        assert declared is not None
        if len(buffer) >= declared:
            body = bytes(buffer[:declared])
            message, note = _decode(body)
            if message is not _INVALID:  # the normal case: one parse, nothing searched
                self._end_body(declared)
                return Frame(message, note=note)
        # Rule 1: a header line that starts inside the declared body (and may end just past it).
        scan_end = min(len(buffer), declared + _HEADER_LINE_MAX)
        match = _HEADER_LINE_IN_BODY.search(buffer, self._scanned, scan_end)
        if match is not None and match.start() < declared:
            # (A Content-Type line before it stays with the body's bytes, and is read again after the
            # JSON object at their front: see _cut_body.)
            cut = match.start()
            part = bytes(buffer[:cut])
            self._end_body(cut)
            return self._cut_body(part, declared)
        if len(buffer) < declared:
            self._scanned = max(0, len(buffer) - _HEADER_LINE_MAX)
            return None
        body = bytes(buffer[:declared])
        end = _json_object_end(body)
        if end is not None:  # rule 2
            self._end_body(end)
            return _message_frame(body[:end], f"Content-Length said {declared} bytes, the message had {end}")
        # Rule 4. The body's last bytes go back: they may hold the start of the next header, cut by a
        # length too large; skipped quietly otherwise.
        keep = min(len(body), _HEADER_LINE_MAX)
        self._end_body(declared - keep)
        self._discarding = True
        return Frame(error_code=PARSE_ERROR, problem=f"the message is not valid JSON ({declared} bytes: {body[:60]!r})")

    def _cut_body(self, part: bytes, declared: int) -> Frame:
        """The bytes of a body that a header line ended early (rule 1)."""
        if not part.strip():
            return Frame(error_code=PARSE_ERROR, problem=f"a header (Content-Length {declared}) without a body")
        note = f"Content-Length said {declared} bytes, a header followed after {len(part)}"
        message, decode_note = _decode(part)
        if message is not _INVALID:
            return Frame(message, note="; ".join(filter(None, [note, decode_note])))
        end = _json_object_end(part)
        if end is not None:  # what follows the object is read again (a header block without a length, say)
            self._buffer[:0] = part[end:]
            return _message_frame(part[:end], note)
        return Frame(error_code=PARSE_ERROR, problem=f"the message is not valid JSON ({len(part)} bytes before the "
                                                     f"next header: {part[:60]!r})")

    def _end_body(self, consumed: int) -> int:
        """Drop ``consumed`` bytes of the body being read and go back to reading headers; the declared length."""
        declared = self._pending
        del self._buffer[:consumed]
        self._pending, self._scanned, self._stall_checked = None, 0, -1
        return declared

    def _content_length(self, header: bytes) -> tuple[int | None, str]:
        lengths = set()
        for line in header.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                value = value.strip()
                if not value.isdigit() or len(value) > 18:
                    return None, f"an invalid Content-Length {value[:30]!r}"
                lengths.add(int(value))
        if not lengths:
            return None, f"a header without Content-Length: {header[:60]!r}"
        if len(lengths) > 1:
            return None, f"conflicting Content-Length headers {sorted(lengths)}"
        (length,) = lengths
        if length > self.max_content_length:
            return None, f"Content-Length {length} is over the limit of {self.max_content_length} bytes"
        return length, ""


def _header_start(block: bytes) -> int:
    """Where the header lines of ``block`` (the bytes before a blank line) begin; ``len(block)`` if none."""
    lines = block.split(b"\r\n")
    offsets, position = [], 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 2
    start = len(block)
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        glued = None
        for glued in _KNOWN_NAME.finditer(line):
            pass  # the last one
        if glued is not None and glued.start() > 0 and _WELL_FORMED_HEADER.fullmatch(line, glued.start()):
            return offsets[index] + glued.start()  # a body's tail glued to the next header
        if not _GENERIC_HEADER_LINE.fullmatch(line):
            break
        start = offsets[index]
    return start


def _message_frame(body: bytes, note: str) -> Frame:
    message, decode_note = _decode(body)
    return Frame(message, note="; ".join(filter(None, [note, decode_note])))


_INVALID = object()


def _decode(body: bytes) -> tuple[Any, str]:
    """The JSON value of ``body`` (invalid UTF-8 replaced by U+FFFD, with a note), or ``_INVALID``."""
    note = ""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = body.decode("utf-8", errors="replace")
        note = "the message held invalid UTF-8 (replaced by U+FFFD)"
    try:
        return json.loads(text), note
    except (ValueError, RecursionError):
        return _INVALID, note


def _json_object_end(body: bytes) -> int | None:
    """The length in bytes of a whole JSON object at the start of ``body`` (leading whitespace included), or None."""
    text = body.decode("utf-8", errors="surrogateescape")  # one character per invalid byte: offsets map back
    start = len(text) - len(text.lstrip())
    if not text[start:].startswith("{"):
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        return None
    return len(text[:end].encode("utf-8", errors="surrogateescape"))
