"""The request the LLM micro coder sends: one goal for one kernel, the file with line numbers, and the rules."""

from __future__ import annotations

from ..analysis import FileAnalysis, Kernel
from ..hardware import GpuProfile
from .chat import Message
from .patch import split_lines
from .region import Region, editable_regions

SYSTEM = (
    "You are the micro coder of a Triton kernel optimizer. You make one small, semantics-preserving change "
    "to one kernel for one goal, and you answer with a single unified diff of the file and nothing else."
)


def build_messages(analysis: FileAnalysis, kernel: Kernel, goal: str, target: GpuProfile, file_name: str,
                   max_changed_lines: int) -> list[Message]:
    """The system and user messages for rewriting ``kernel`` towards ``goal`` on ``target``."""
    regions = editable_regions(analysis, kernel)
    launch_code = [r for r in regions if r.what != "kernel"]
    where = f"the kernel {kernel.name} ({_lines(regions[0])})"
    if launch_code:
        where += " and, only where the goal needs it, the code that launches it (" + ", ".join(
            f"{r.what} {_lines(r)}" for r in launch_code) + ")"
    rules = [
        f"Answer with ONE unified diff of {file_name} only, inside a ```diff block: a `--- a/{file_name}` line, "
        f"a `+++ b/{file_name}` line, then hunks that start with `@@`; context lines start with a space, removed "
        "lines with `-`, added lines with `+`.",
        "Copy context and removed lines exactly as they are in the file, without the line numbers shown below; "
        "give two or three context lines around each change.",
        f"Change at most {max_changed_lines} lines.",
        f"Edit only {where}.",
        "Keep every kernel's name and parameters (the signature), and keep what the file computes: the outputs "
        "must stay the same for every input.",
    ]
    user = "\n".join([
        f"Target GPU: {target.summary()}",
        f"Goal: {goal.strip()}",
        f"Kernel: {kernel.name}",
        "",
        "Rules:",
        *(f"- {rule}" for rule in rules),
        "",
        f"{file_name}, with line numbers:",
        "```",
        numbered_source(analysis.text),
        "```",
    ])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def numbered_source(text: str) -> str:
    """``text`` with right-aligned 1-based line numbers and a bar, e.g. ``  12 | x = 1``."""
    lines = split_lines(text)
    width = len(str(len(lines)))
    return "\n".join(f"{number:>{width}} | {line}".rstrip() for number, line in enumerate(lines, 1))


def _lines(region: Region) -> str:
    return f"lines {region.start + 1}-{region.end + 1}"
