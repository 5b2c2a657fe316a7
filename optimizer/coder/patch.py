"""Reading a model's unified diff and applying it to the current text by its content, not its line numbers.

A model's hunk headers are unreliable (wrong line numbers and counts, or a bare ``@@``), so they
are ignored: each hunk's old lines (context and removals) are looked up in the text, exactly first,
then with whitespace runs collapsed, then with a copied ``  12 | `` line-number prefix stripped.
A hunk must match in exactly one place; a missing or ambiguous match refuses the whole diff.
Library parsers (unidiff, whatthepatch) trust the header counts, which is why this one does not use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CoderError

_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[^\n]*\n(.*?)^```", re.M | re.S)
_NUMBER_PREFIX = re.compile(r"^\s*\d+\s?\|\s?")  # a line copied from the prompt's numbered source
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # one line with its ending, as optimizer.analysis counts


class PatchError(CoderError):
    """The diff cannot be read, or does not apply to the current text."""


@dataclass
class Hunk:
    """One hunk: ``(op, text)`` lines with op ``" "`` (context), ``"-"`` (removed) or ``"+"`` (added)."""

    lines: list[tuple[str, str]]
    number: int  # 1-based, for messages

    @property
    def old(self) -> list[str]:
        return [text for op, text in self.lines if op != "+"]

    @property
    def changes(self) -> bool:
        return any(op != " " for op, _ in self.lines)


def extract_diff(answer: str) -> str | None:
    """The diff inside a model's answer: its ```diff fenced blocks, else the text from the first header; None when none."""
    fenced = [body for lang, body in _FENCE.findall(answer)
              if lang.lower() in ("diff", "patch", "udiff") or _looks_like_diff(body)]
    if fenced:
        return "".join(body if body.endswith("\n") else body + "\n" for body in fenced)
    lines = _LINE.findall(answer)
    for i, line in enumerate(lines):
        if line.startswith("@@") or (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            return "".join(lines[i:])
    return None


def _looks_like_diff(body: str) -> bool:
    return any(line.startswith("@@") for line in split_lines(body))


def parse_diff(diff: str) -> list[Hunk]:
    """The hunks of a one-file unified diff (header numbers ignored); ``PatchError`` when it is malformed."""
    hunks: list[Hunk] = []
    files: set[str] = set()
    current: list[tuple[str, str]] | None = None
    ended_at: int | None = None  # the line where the diff's text ended (prose after it is allowed)
    lines = split_lines(diff)
    for index, line in enumerate(lines):
        number = index + 1
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            files.add(_file_name(lines[index + 1][4:]))
            current = None
            continue
        if line.startswith("+++ ") and index > 0 and lines[index - 1].startswith("--- "):
            continue
        if line.startswith("@@"):
            if ended_at is not None:
                raise PatchError(f"the diff is malformed: line {ended_at} is not a diff line "
                                 f"({_quote(lines[ended_at - 1])}) but more hunks follow")
            current = []
            hunks.append(Hunk(current, len(hunks) + 1))  # "@@ -12,5 +12,6 @@ def f():", or a bare "@@"
            continue
        if current is None or ended_at is not None:
            if current is None and line.strip() and not line.startswith(("diff ", "index ", "new file", "deleted file")):
                if hunks or files:
                    ended_at = ended_at or number
            continue
        if line == "":
            current.append((" ", ""))  # a blank context line whose leading space was dropped
        elif line[0] in " -+":
            current.append((line[0], line[1:]))
        elif line.startswith("\\"):
            continue  # "\ No newline at end of file"
        else:
            ended_at = number
    if len(files) > 1:
        raise PatchError(f"the diff changes {len(files)} files ({', '.join(sorted(files))}); answer with this file only")
    if not hunks:
        raise PatchError("the diff has no hunks (no '@@' line)")
    for hunk in hunks:
        while hunk.lines and hunk.lines[-1] == (" ", ""):
            hunk.lines.pop()  # trailing blank context anchors nothing and may be the gap before prose
    changing = [h for h in hunks if h.changes]
    if not changing:
        raise PatchError("the diff changes nothing (no '+' or '-' lines)")
    return changing


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` without their endings, broken only at \\n, \\r\\n and \\r (as Python and LSP count
    lines; ``str.splitlines`` would also break at form feeds and other separators and shift later lines)."""
    return [line.rstrip("\r\n") for line in _LINE.findall(text)]


def apply_hunks(text: str, hunks: list[Hunk]) -> str:
    """``text`` with every hunk applied where its old lines uniquely match; ``PatchError`` otherwise.

    Lines the hunks do not touch, and context lines, keep their bytes and line endings; added lines
    end like the file's first line (LF when it has none).
    """
    with_ends = _LINE.findall(text)
    lines = [line.rstrip("\r\n") for line in with_ends]
    newline = next((line[len(line.rstrip("\r\n")):] for line in with_ends if line.endswith(("\n", "\r"))), "\n")
    placed: list[tuple[int, Hunk, int, bool]] = []  # (start, hunk, old line count, numbered)
    for hunk in hunks:
        old = hunk.old
        if not any(line.strip() for line in old):
            raise PatchError(f"hunk {hunk.number} has no context or removed lines to place it by")
        start, mode = _locate(lines, old, hunk.number)
        placed.append((start, hunk, len(old), mode == "numbered"))
    placed.sort(key=lambda item: item[0])
    for (start, hunk, count, _), (next_start, next_hunk, _, _) in zip(placed, placed[1:]):
        if start + count > next_start:
            raise PatchError(f"hunks {hunk.number} and {next_hunk.number} overlap in the file")
    for start, hunk, count, numbered in reversed(placed):
        block = with_ends[start:start + count]
        replacement = _replacement(hunk, block, numbered, newline)
        if replacement and block and not block[-1].endswith(("\n", "\r")):
            replacement[-1] = replacement[-1].rstrip("\r\n")  # the file's last line had no newline: keep it so
        with_ends[start:start + count] = replacement
    return "".join(with_ends)


def _replacement(hunk: Hunk, block: list[str], numbered: bool, newline: str) -> list[str]:
    """The hunk's new lines (with endings): the file's own context lines, and added lines re-indented like their neighbours.

    When the match ignored whitespace, the model's indentation may be off; an added line then takes
    the indentation shift of the nearest old line above it (below, for a hunk that starts with additions).
    """
    matched = [line.rstrip("\r\n") for line in block]
    ops = [(op, _strip_number(line) if numbered else line) for op, line in hunk.lines]
    shifts: list[str | None] = []  # per op: the shift of that old line, None for added lines
    old_index = 0
    for op, line in ops:
        if op == "+":
            shifts.append(None)
        else:
            shifts.append(_indent_shift(line, matched[old_index]))
            old_index += 1
    out: list[str] = []
    old_index = 0
    for position, (op, line) in enumerate(ops):
        if op == " ":
            out.append(block[old_index])  # the file's own context line, byte for byte
            old_index += 1
        elif op == "-":
            old_index += 1
        else:
            above = [s for s in shifts[:position] if s is not None]
            below = [s for s in shifts[position + 1:] if s is not None]
            shift = above[-1] if above else (below[0] if below else "")
            out.append(_reindent(line, shift) + newline)
    return out


def _locate(lines: list[str], old: list[str], number: int) -> tuple[int, str]:
    """Where ``old`` matches in ``lines``: (start, "exact" | "whitespace" | "numbered")."""
    tries = (
        ("exact", lambda s: s, old),
        ("whitespace", _squash, old),
        ("numbered", _squash, [_strip_number(line) for line in old]),
    )
    for mode, norm, wanted in tries:
        if mode == "numbered" and not all(_NUMBER_PREFIX.match(line) or not line.strip() for line in old):
            continue
        starts = _find_all([norm(line) for line in lines], [norm(line) for line in wanted])
        if len(starts) == 1:
            return starts[0], mode
        if len(starts) > 1:
            where = ", ".join(str(s + 1) for s in starts[:4])
            raise PatchError(f"hunk {number} is ambiguous: its old lines match at lines {where}; "
                             "it needs more context lines")
    first = next((line for line in old if line.strip()), "")
    raise PatchError(f"hunk {number} does not apply: its old lines (from {_quote(first)}) are not in the file")


def _find_all(haystack: list[str], needle: list[str]) -> list[int]:
    n = len(needle)
    return [i for i in range(len(haystack) - n + 1) if haystack[i:i + n] == needle]


def _squash(line: str) -> str:
    return " ".join(line.split())


def _strip_number(line: str) -> str:
    return _NUMBER_PREFIX.sub("", line, count=1)


def _indent_shift(model_line: str, file_line: str) -> str | None:
    """How the file's indentation differs from the model's on one line: ``""``, ``"+    "`` (add) or
    ``"-  "`` (remove); None when either line is blank or the two indentations differ in kind."""
    if not file_line.strip() or not model_line.strip():
        return None
    model_indent = model_line[:len(model_line) - len(model_line.lstrip())]
    file_indent = file_line[:len(file_line) - len(file_line.lstrip())]
    if file_indent.startswith(model_indent):
        return "+" + file_indent[len(model_indent):] if file_indent != model_indent else ""
    if model_indent.startswith(file_indent):
        return "-" + model_indent[len(file_indent):]
    return None


def _reindent(line: str, delta: str) -> str:
    if not delta or not line.strip():
        return line
    if delta[0] == "+":
        return delta[1:] + line
    removed = delta[1:]
    return line[len(removed):] if line.startswith(removed) else line


def _file_name(header: str) -> str:
    name = header.split("\t")[0].strip()
    return name[2:] if name.startswith(("a/", "b/")) else name


def _quote(line: str, limit: int = 60) -> str:
    line = line.strip()
    return repr(line if len(line) <= limit else line[:limit] + "...")
