"""``mtmc actions`` and ``mtmc apply`` end to end (in-process through the CLI's main)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mtmc_lsp.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_actions_lists_candidates_with_parameters(capsys):
    assert main(["actions", str(ROOT / "mtmc_lsp/examples/matmul.py"), "--target", "h100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cands = data["kernels"]["matmul_kernel"]
    assert data["target"] == "h100"
    titles = [c["title"] for c in cands]
    # 128x128x64 over 4 warps spills on sm_90 (ptxas), so the tile comes with 8 warps.
    assert "Apply tiling for H100 (BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)" in titles
    assert {c["action"] for c in cands} >= {"tiling", "pipelining", "reordering", "autotune"}
    assert not any(c["changesNumerics"] for c in cands)


def test_actions_text_and_unknown_kernel(capsys):
    path = str(ROOT / "mtmc_lsp/examples/softmax.py")
    assert main(["actions", path, "--target", "a100"]) == 0
    out = capsys.readouterr().out
    assert "single_pass" in out and "--action single_pass" in out
    assert main(["actions", path, "--kernel", "nope"]) == 1
    assert "no kernel 'nope'" in capsys.readouterr().err


def test_apply_diff_then_write_records_history(tmp_path, capsys, monkeypatch):
    doc = tmp_path / "gelu_bias.py"
    shutil.copy(ROOT / "mtmc_lsp/examples/gelu_bias.py", doc)
    original = doc.read_text()
    assert main(["apply", str(doc), "--kernel", "scale_bias_kernel", "--action", "fusion",
                 "--param", "consumer=gelu_kernel", "--target", "h100"]) == 0
    captured = capsys.readouterr()
    assert "-    gelu_kernel[grid](y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)" in captured.out
    assert "-def gelu_kernel(y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):" in captured.out  # now unused
    assert "13 lines changed" in captured.err
    assert doc.read_text() == original  # --diff leaves the file alone
    monkeypatch.chdir(tmp_path)
    assert main(["apply", str(doc), "--kernel", "scale_bias_kernel", "--action", "tiling",
                 "--param", "BLOCK_SIZE=2048", "--write"]) == 0
    assert "BLOCK_SIZE = 2048" in doc.read_text()
    assert "step 1" in capsys.readouterr().out
    assert main(["actions", str(doc), "--history"]) == 0
    assert "Apply tiling" in capsys.readouterr().out


def test_apply_refuses_illegal_parameters_and_precision(capsys):
    path = str(ROOT / "mtmc_lsp/examples/matmul.py")
    assert main(["apply", path, "--kernel", "matmul_kernel", "--action", "tiling", "--target", "h100",
                 "--param", "BLOCK_M=128", "--param", "BLOCK_N=256", "--param", "BLOCK_K=64"]) == 1
    assert "registers per thread" in capsys.readouterr().err
    assert main(["apply", path, "--kernel", "matmul_kernel", "--action", "tiling", "--param", "BLOCK_M=100"]) == 1
    assert "powers of two" in capsys.readouterr().err
    assert main(["apply", path, "--kernel", "matmul_kernel", "--action", "precision"]) == 2
    assert "--allow-precision" in capsys.readouterr().err
    assert main(["apply", path, "--kernel", "matmul_kernel", "--action", "nonsense"]) == 2


ROW_SCALE = '''import torch
import triton
import triton.language as tl


@triton.jit
def twice(x):
    return x * 2


@triton.jit
def row_scale_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)
    tl.store(y_ptr + row * n_cols + cols, twice(x), mask=cols < n_cols)


def row_scale(x):
    y = torch.empty_like(x)
    row_scale_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''


def test_actions_why_says_why_each_action_does_not_apply(tmp_path, capsys):
    path = tmp_path / "row_scale.py"
    path.write_text(ROW_SCALE)
    assert main(["actions", str(path), "--target", "h100", "--why"]) == 0
    out = capsys.readouterr().out
    # The computed block is quoted, so the user sees what to change; numerics-changing actions say how to ask.
    assert "tiling           BLOCK: the launch computes `triton.next_power_of_2(x.shape[1])`, one block that covers the whole row" in out
    assert "precision        changes numerics: listed only on request (--allow-precision)" in out
    assert "twice" in out and "a device function (row_scale_kernel call it)" in out
    assert main(["actions", str(path), "--target", "h100", "--why", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    refused = {r["action"]: r["reason"] for r in data["refused"]["row_scale_kernel"]}
    offered = {c["action"] for c in data["kernels"]["row_scale_kernel"]}
    assert "pipelining" in refused and refused["pipelining"] == "no loop feeds tl.dot"
    assert not offered & set(refused)  # an action is offered or refused, never both
    # Without --why nothing is explained.
    assert main(["actions", str(path), "--target", "h100", "--json"]) == 0
    assert "refused" not in json.loads(capsys.readouterr().out)


def test_refusals_carry_the_reason_a_shared_kernel_keeps_its_interface(tmp_path):
    from mtmc_lsp.optimizer.actions.refusals import refusals
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    shutil.copy(ROOT / "mtmc_lsp/examples/gelu_bias.py", tmp_path / "gelu_bias.py")
    (tmp_path / "ops.py").write_text("from gelu_bias import gelu_kernel\n\n\ndef gelu(x, y):\n"
                                     "    gelu_kernel[(1,)](x, y, x.numel(), BLOCK=1024)\n")
    text = (tmp_path / "gelu_bias.py").read_text()
    analysis = analyze(text, str(tmp_path / "gelu_bias.py"))
    reasons = {r.action: r.reason for r in refusals(analysis, analysis.kernel("scale_bias_kernel"), get_profile("h100"))}
    assert "gelu_kernel is also launched in ops.py" in reasons["fusion"]
