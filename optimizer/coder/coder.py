"""The LLM micro coder: one goal for one kernel -> a chat model's diff -> the checked step, or a refusal.

``LlmCoder.rewrite`` returns the same ``Edit`` the rule actions return, with a ``Candidate``
(action ``"llm"``) for the step history, so ``mtmc apply --write``, rejecting the step and
``mtmc verify`` treat it exactly like a rule step. The user's text is never modified here: the
caller writes ``edit.new_text`` only after it came back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..actions.base import Candidate, Edit
from ..analysis import analyze
from ..hardware import GpuProfile
from .chat import Chat
from .errors import CoderError
from .gate import check_rewrite
from .patch import extract_diff, parse_diff, apply_hunks
from .prompt import build_messages

ACTION_NAME = "llm"
MAX_CHANGED_LINES = 30
MAX_ANSWER_TOKENS = 1024

# Which macro kind a free-text goal is about, for the history and the policy's per-kind statistics:
# the kind named first in the goal wins ("retile ... with one warp" is Tiling); none named: "LLM".
_KIND_PATTERNS = (
    ("Fusion", r"\bfus(e|ed|es|ing|ion)\b"),
    ("TensorCore", r"tensor ?core|tl\.dot|\bdot\b|\bmma\b"),
    ("Autotune", r"autotun"),
    ("Pipelining", r"pipelin|num_stages|\bstages?\b"),
    ("Warps", r"num_warps|\bwarps?\b"),
    ("Reordering", r"reorder|swizzl|group_m|program order|contiguous|coalesc"),
    ("Hoist", r"\bhoist"),
    ("Precision", r"precision|tf32|fp16|bf16|fp8"),
    ("Tiling", r"til(e|es|ed|ing)\b|block[ _]?size|\bblock_\w+|single[- ]pass|one pass"),
)


def goal_kind(goal: str) -> str:
    """The macro kind a goal names (``"tile the column reduction in 2-D"`` -> ``"Tiling"``), else ``"LLM"``."""
    lowered = goal.lower()
    found = [(match.start(), kind) for kind, pattern in _KIND_PATTERNS if (match := re.search(pattern, lowered))]
    return min(found)[1] if found else "LLM"


@dataclass
class CoderStep:
    """A checked LLM step: the candidate the history records, the edit, and what the model said."""

    candidate: Candidate
    edit: Edit
    answer: str  # the model's whole answer
    diff: str  # the diff found in it


class LlmCoder:
    """Asks a chat model for one small diff towards a goal and keeps it only if it passes the gate."""

    def __init__(self, chat: Chat, max_changed_lines: int = MAX_CHANGED_LINES, max_tokens: int = MAX_ANSWER_TOKENS):
        self.chat = chat
        self.max_changed_lines = max_changed_lines
        self.max_tokens = max_tokens

    def rewrite(self, text: str, kernel_name: str, goal: str, target: GpuProfile, file_name: str = "kernel.py") -> CoderStep:
        """The checked step for ``goal`` on ``kernel_name`` in ``text``; ``CoderError`` (one line) when refused."""
        goal = " ".join(goal.split())
        if not goal:
            raise CoderError("the goal is empty; say what to change, e.g. 'use BLOCK_SIZE 1024 and 8 warps'")
        analysis = analyze(text)
        if analysis.syntax_error is not None:
            raise CoderError(f"the file has a syntax error: {analysis.syntax_error.message}")
        kernel = analysis.kernel(kernel_name)
        if kernel is None:
            known = ", ".join(k.name for k in analysis.kernels) or "none"
            raise CoderError(f"no kernel named {kernel_name!r} in the file (kernels: {known})")
        messages = build_messages(analysis, kernel, goal, target, file_name, self.max_changed_lines)
        answer = self.chat.complete(messages, self.max_tokens)
        diff = extract_diff(answer)
        if diff is None:
            start = " ".join(answer.split())[:60]
            raise CoderError(f"the model's answer holds no unified diff (it starts: {start!r})")
        new_text = apply_hunks(text, parse_diff(diff))
        changed = check_rewrite(analysis, kernel, new_text, self.max_changed_lines)
        short_goal = goal if len(goal) <= 80 else goal[:77] + "..."
        candidate = Candidate(
            action=ACTION_NAME, kind=goal_kind(goal), kernel=kernel.name,
            params={"goal": goal, "coder": self.chat.describe()},
            title=f"LLM: {short_goal} ({kernel.name})", line=kernel.def_span.start.line,
        )
        edit = Edit(new_text, changed, f"{self.chat.describe()} rewrote {kernel.name}: {short_goal}",
                    notes=["written by a language model: verify it (mtmc verify) before keeping it"])
        return CoderStep(candidate, edit, answer, diff)
