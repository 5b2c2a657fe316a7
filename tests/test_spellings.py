"""The spellings corpus (dev part): each file gets its obvious step, and the step keeps its outputs in the interpreter.

The held-out part (tests/corpus/spellings/heldout) is evaluated in the report, never here: tests steer the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.actions.refusals import refusals
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

DEV = Path(__file__).parent / "corpus" / "spellings" / "dev"
RUNNER = Path(__file__).parent / "corpus" / "kernels" / "_equivalence.py"
TARGET = get_profile("h100")
# file -> (kernel, the step an engineer would take first)
OBVIOUS = {
    "rope_heads_split": ("rope_kernel", "rows_per_program"),  # one (token, head) per program, split as pid // H, pid % H
    "attn_three_kernels_heads": ("qk_kernel", "flash_attention"),
    "ew_autotuned_scale_add": ("scale_add_kernel", "tiling"),
    "mm_transposed_a_strides": ("at_b_kernel", "tiling"),
    "mm_then_bias_gelu_rows": ("mm_kernel", "matmul_epilogue"),  # a row-per-program bias+GELU after the matmul
}


def test_every_dev_file_has_its_obvious_step_and_it_keeps_the_outputs(tmp_path):
    jobs = []
    for stem, (kernel, action) in OBVIOUS.items():
        text = (DEV / f"{stem}.py").read_text()
        offered = [c for c in applicable(analyze(text), kernel, TARGET) if c.action == action]
        assert offered, f"{stem}: {action} is not offered for {kernel}"
        after = tmp_path / f"{stem}_after.py"
        after.write_text(apply_candidate(text, offered[0], TARGET).new_text)
        jobs.append({"name": stem, "before": str(DEV / f"{stem}.py"), "after": str(after), "atol": 1e-4, "rtol": 1e-4})
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "jobs.json"), str(tmp_path / "results.json")],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wrong = [(r["name"], r["max_abs_diff"], r["error"]) for r in json.loads((tmp_path / "results.json").read_text()) if not r["ok"]]
    assert not wrong


@pytest.mark.parametrize("old,new,reason", [
    # One row short: the consumer no longer covers the buffer, so the producer's store cannot stand for it.
    ("bias_gelu_kernel[(M, ", "bias_gelu_kernel[(M - 1, ", "does not cover all of c"),
    ("triton.cdiv(N, 64))](c, bias", "triton.cdiv(N, 128))](c, bias", "does not cover all of c"),
    # Without the column mask the last block reads past the row.
    ("    mask = cols < N\n", "    mask = cols < N + 1\n", "does not cover all of c"),
    # The bias read at the row, not the column.
    ("tl.load(bias_ptr + cols, mask=mask", "tl.load(bias_ptr + row + cols, mask=mask", "other than once per column"),
])
def test_a_row_grid_epilogue_is_refused_when_it_does_not_cover_the_buffer(old, new, reason):
    text = (DEV / "mm_then_bias_gelu_rows.py").read_text()
    assert old in text
    changed = analyze(text.replace(old, new, 1))
    assert not [c for c in applicable(changed, "mm_kernel", TARGET) if c.action == "matmul_epilogue"]
    why = [r.reason for r in refusals(changed, changed.kernel("mm_kernel"), TARGET) if r.action == "matmul_epilogue"]
    assert any(reason in w for w in why), why
