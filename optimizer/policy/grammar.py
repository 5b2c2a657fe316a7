"""GBNF grammars built from the actions that apply right now: the model cannot name anything else."""

from __future__ import annotations


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def choice_grammar(choices: list[str]) -> str:
    """``root ::= "tiling(BLOCK_M=128, ...)" | "warps(num_warps=8)" | ...``: exactly one listed choice."""
    if not choices:
        raise ValueError("a grammar needs at least one choice")
    lines = ["root ::= " + " | ".join(f"choice{i}" for i in range(len(choices)))]
    lines += [f"choice{i} ::= {gbnf_literal(text)}" for i, text in enumerate(choices)]
    return "\n".join(lines) + "\n"
