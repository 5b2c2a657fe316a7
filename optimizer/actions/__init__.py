"""The optimization actions (micro coding): one module per action, each a small libcst rewrite.

``applicable`` lists what can be done to a kernel on a target; ``apply_candidate`` re-reads the
text, checks the candidate's preconditions again and returns the edit (or raises ``ActionError``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..analysis import FileAnalysis, Kernel, analyze
from ..analysis.workspace import with_foreign_launches
from ..hardware import GpuProfile
from .base import KINDS, Action, ActionError, Candidate, Edit

# Registry order is the order candidates are listed in (roughly: the usual order of an expert chain).
_MODULES = (
    "tiling", "vectorize", "name_block", "warps", "pipelining", "reordering", "persistent", "mask_free_k", "tensor_descriptor", "split_k", "split_reduction", "row_partials", "split_kv", "single_pass", "online_softmax", "column_block", "channel_tile", "rows_per_program", "row_grid", "batch_launches", "fusion", "fuse_calls", "prologue", "row_fusion", "epilogue", "matmul_epilogue", "flash_attention", "autotune", "use_dot", "hoist", "fast_exp",
    "contiguity", "precision",
)


def _load() -> dict[str, Action]:
    actions: dict[str, Action] = {}
    for module_name in _MODULES:
        action = importlib.import_module(f"{__name__}.{module_name}").ACTION
        actions[action.name] = action
    return actions


ACTIONS: dict[str, Action] = _load()

# Actions that edit a kernel's decorators or move or remove its definition: they need a decorated def
# (autotune wraps a ``triton.jit(f)`` call too; tiling and pipelining find configs in the wrapping call).
_DEFINITION_EDITS = frozenset({"split_k", "split_reduction", "row_partials", "split_kv", "fusion", "prologue", "row_fusion", "matmul_epilogue", "flash_attention", "fuse_calls"})
# ... and those that need it launched by its own name: an autotuner on a factory's kernel is built again,
# and tunes again, on every call of the factory.
_FACTORY_EDITS = _DEFINITION_EDITS | {"autotune"}


def applicable(analysis: FileAnalysis, kernel: Kernel | str, target: GpuProfile, allow_precision: bool = False) -> list[Candidate]:
    """Every concrete action that applies to ``kernel`` on ``target``; numerics-changing ones only on request."""
    if analysis.syntax_error is not None or analysis.stale:
        return []
    if isinstance(kernel, str):
        found = analysis.kernel(kernel)
        if found is None:
            return []
        kernel = found
    if not analysis.foreign_searched:
        analysis = with_foreign_launches(analysis)
    out: list[Candidate] = []
    for action in ACTIONS.values():
        if action.changes_numerics and not allow_precision:
            continue
        try:
            found = action.candidates(analysis, kernel, target)
        except ActionError:
            continue  # preconditions not provable: the action does not offer itself
        out.extend(c for c in found if interface_conflict(analysis, c) is None and spelling_conflict(analysis, c) is None)
    return out


def spelling_conflict(analysis: FileAnalysis, candidate: Candidate) -> str | None:
    """Why ``candidate`` cannot edit a kernel spelled another way (None when it can): a def jitted by a call
    (``f = triton.jit(f)``) has no decorators to edit, and a factory's kernel is made again on each call."""
    named = {v for v in candidate.params.values() if isinstance(v, str) and analysis.kernel(v) is not None}
    for name in sorted({candidate.kernel} | named):
        kernel = analysis.kernel(name)
        if kernel is None:
            continue
        if kernel.jit_call is not None and candidate.action in _DEFINITION_EDITS:
            return (f"{name} is jitted by a call (line {kernel.jit_call.start.line + 1}), not decorated: "
                    f"{candidate.action} edits decorators or the definition")
        if kernel.factories and candidate.action in _FACTORY_EDITS:
            return (f"{name} is made by {kernel.factories[0]}() on each call; {candidate.action} would rewrite "
                    f"the definition it returns")
    return None


def interface_conflict(analysis: FileAnalysis, candidate: Candidate) -> str | None:
    """Why ``candidate`` would break another module that launches a kernel it changes (None when it would not).

    A kernel another module launches keeps its interface: fusing it, changing its parameters or what a
    program computes would silently change that module's results. Launch values, hints and body rewrites
    with the same results (``keeps_interface``) are safe. ``analysis`` needs ``with_foreign_launches``."""
    action = ACTIONS.get(candidate.action)
    if not analysis.foreign_launches or action is None or getattr(action, "keeps_interface", False):
        return None
    named = {v for v in candidate.params.values() if isinstance(v, str) and analysis.kernel(v) is not None}
    for launch in analysis.foreign_launches:
        if launch.kernel in {candidate.kernel} | named:
            where = Path(launch.file).name if launch.file else "another module"
            return (f"{launch.kernel} is also launched in {where} (line {launch.span.start.line + 1}); "
                    f"{candidate.action} would change it there too")
    return None


def apply_candidate(text: str, candidate: Candidate, target: GpuProfile) -> Edit:
    """Apply one candidate to ``text``, re-checking everything against the text as it is now."""
    action = ACTIONS.get(candidate.action)
    if action is None:
        raise ActionError(f"unknown action {candidate.action!r}; known: {', '.join(ACTIONS)}")
    analysis = analyze(text)
    if analysis.syntax_error is not None:
        raise ActionError(f"the file has a syntax error: {analysis.syntax_error.message}")
    kernel = analysis.kernel(candidate.kernel)
    if kernel is None:
        raise ActionError(f"no kernel named {candidate.kernel!r} in the file")
    conflict = spelling_conflict(analysis, candidate)
    if conflict is not None:
        raise ActionError(conflict)
    return action.apply(text, analysis, kernel, dict(candidate.params), target)


__all__ = ["ACTIONS", "KINDS", "Action", "ActionError", "Candidate", "Edit", "applicable", "apply_candidate", "interface_conflict",
           "spelling_conflict"]
