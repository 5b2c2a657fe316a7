"""Every action module's docstring example: applying the action to "before" gives exactly "after"."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, applicable, apply_candidate
from mtmc_lsp.optimizer.actions.base import Candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

PRELUDE = "import torch\nimport triton\nimport triton.language as tl\n\n\n"


def docstring_example(action_name: str) -> tuple[str, str, str, str, dict]:
    """(before, after, kernel, target, params) from the action module's docstring."""
    module = importlib.import_module(f"mtmc_lsp.optimizer.actions.{action_name}")
    doc = module.__doc__ or ""
    header = re.search(r"^Example: kernel=(\w+) target=(\w+) params=(\{.*\})$", doc, re.M)
    before = re.search(r"```python before\n(.*?)```", doc, re.S)
    after = re.search(r"```python after\n(.*?)```", doc, re.S)
    assert header and before and after, f"{action_name}: docstring lacks the Example/before/after blocks"
    return PRELUDE + before.group(1), PRELUDE + after.group(1), header.group(1), header.group(2), json.loads(header.group(3))


@pytest.mark.parametrize("action_name", sorted(ACTIONS))
def test_docstring_example(action_name):
    before, after, kernel, target_key, params = docstring_example(action_name)
    target = get_profile(target_key)
    action = ACTIONS[action_name]
    offered = [c for c in applicable(analyze(before), kernel, target, allow_precision=True) if c.action == action_name]
    assert any(c.params == params for c in offered), f"{action_name} does not offer {params}: {[c.params for c in offered]}"
    candidate = Candidate(action_name, action.kind, kernel, params, "example", 0, action.changes_numerics)
    edit = apply_candidate(before, candidate, target)
    assert edit.new_text == after
    assert 0 < edit.changed_lines < getattr(action, "max_changed_lines", 20)  # flash_attention: three kernels become one
