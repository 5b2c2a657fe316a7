"""KernelBench's problems split once, by problem number: odd numbers train the policy, even ones evaluate it.

The learning issue trains on kernels lowered from half of levels 1-3 and the scoreboard reports the
other half; the rule must never move, or an evaluation problem could leak into training. By number
because KernelBench orders each level by op class (level 1: matmuls 1-18, activations 19-32, norms,
pools, reductions, convolutions 50-87, ...), so odd/even halves every class evenly. Level 1 and 2
give 50 + 50 each, level 3 25 + 25.
"""

from __future__ import annotations

import re
from pathlib import Path

TRAIN, EVAL = "train", "eval"
SPLITS = (TRAIN, EVAL)


def problem_number(name: str | Path) -> int:
    """The number a KernelBench problem file starts with (``23_Softmax.py`` -> 23)."""
    match = re.match(r"(\d+)_", Path(name).name)
    if match is None:
        raise ValueError(f"not a KernelBench problem name (NUMBER_Name.py): {Path(name).name}")
    return int(match.group(1))


def split_of(name: str | Path) -> str:
    """``train`` for odd problem numbers, ``eval`` for even ones."""
    return TRAIN if problem_number(name) % 2 else EVAL


def in_split(files: list[Path], split: str) -> list[Path]:
    """The files of one split (``all``: every file)."""
    if split == "all":
        return list(files)
    if split not in SPLITS:
        raise ValueError(f"split must be train, eval or all, not {split!r}")
    return [f for f in files if split_of(f) == split]
