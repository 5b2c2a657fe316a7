"""Level-3 shapes of code: forwards that slice, loop or branch on input shapes, and defaulted arguments, lower."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

torch = pytest.importorskip("torch")

from mtmc_lsp.optimizer.kernelbench.evaluate import discover_problems, static_check  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.trace import load_problem, trace_problem  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.write import generate, solution_part  # noqa: E402

LEVEL3 = ROOT / "tests" / "kernelbench_problems"

UNROLLED_RNN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)

    def forward(self, x, h0):
        seq_len, batch, _ = x.shape
        hidden = h0.to(x.device)
        assert len(x) == seq_len and x.dim() == 3
        for t in range(seq_len):
            hidden = torch.tanh(self.i2h(torch.cat((x[t], hidden), dim=1)))
        return hidden


def get_inputs():
    return [torch.randn(4, 2, 8), torch.randn(2, 16)]


def get_init_inputs():
    return [8, 16]
"""

STATEFUL_CELL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden = torch.randn(2, hidden_size)
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)

    def forward(self, x, initial_hidden=None):
        if initial_hidden is not None:
            self.hidden.copy_(initial_hidden)
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.hidden


def get_inputs():
    return [torch.randn(2, 8), torch.randn(2, 16)]


def get_init_inputs():
    return [8, 16]
"""

MASKED_POINTWISE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return torch.relu(x).masked_fill(y[:, :1] > 0.5, -1.0) * 2.0


def get_inputs():
    return [torch.randn(8, 32), torch.rand(8, 32)]


def get_init_inputs():
    return []
"""

L2_NORMALIZED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k):
        cosine = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        return cosine + F.normalize(q.sum(-1))[..., None]


def get_inputs():
    return [torch.randn(2, 3, 8, 16), torch.randn(2, 3, 8, 16)]


def get_init_inputs():
    return []
"""

DATA_DEPENDENT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def get_inputs():
    return [torch.randn(4, 4)]
"""


def _run_interpreted(solution: str, tmp_path: Path) -> dict:
    """ModelNew against Model in a subprocess under TRITON_INTERPRET=1 (the interpreter must be set before import)."""
    path = tmp_path / "solution.py"
    path.write_text(solution, encoding="utf-8")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / 'optimizer' / 'kernelbench')!r})
        import runner
        module = runner.load_module(open({str(path)!r}).read(), "generated_solution")
        print(json.dumps(runner.check_correctness(module, module, "cpu", trials=2)))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_level3_folder_holds_the_shape_dependent_problems():
    assert [p.stem for p in discover_problems(LEVEL3, 3)] == ["1_CausalAttentionWindow", "2_LSTMDefaultState"]


def test_causal_attention_with_a_sliced_mask_and_a_shape_branch_lowers_and_matches(tmp_path):
    generated = generate(load_problem(LEVEL3 / "level3" / "1_CausalAttentionWindow.py"))
    forward = solution_part(generated.text).split("def forward", 1)[1]
    # the crop to the last 16 positions was taken at trace time, and its sizes are constants
    assert "Traced at the shapes of get_inputs()" in generated.text
    assert "slice(-16, None, None)" in forward and "view(2, 16, 4, 8)" in forward and ".size(" not in forward
    assert "bias[(slice(None, None, None), slice(None, None, None), slice(None, 16, None)" in forward
    # the projections, both 4-D attention products (q @ k^T with its scale and causal mask) and the softmax
    assert {"linear_kernel", "softmax_kernel", "matmul_mul_masked_fill_kernel", "matmul_kernel"} <= set(generated.kernels)
    assert not generated.fallbacks  # the mask's `== 0` too: no PyTorch op left
    assert not static_check(generated.text).errors
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"] == 2, result


def test_lstm_without_a_given_state_lowers_and_matches(tmp_path):
    generated = generate(load_problem(LEVEL3 / "level3" / "2_LSTMDefaultState.py"))
    assert generated.kernels == ["linear_relu_kernel"]
    assert ("lstm", "no Triton lowering yet for nn.LSTM") in generated.fallbacks  # counted as a PyTorch op left
    assert "def forward(self, x, h0_1=None, c0_1=None):" in generated.text
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"] == 2, result


def test_a_loop_over_a_size_unrolls_and_each_step_calls_one_kernel(tmp_path):
    generated = generate(load_problem(text=UNROLLED_RNN, name="unrolled_rnn"))
    assert generated.kernels == ["linear_tanh_kernel"]  # four steps, one kernel written
    forward = solution_part(generated.text).split("def forward", 1)[1]
    assert forward.count("run_linear_tanh(") == 4
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"] == 2, result


def test_shape_questions_fold_but_data_dependent_branches_still_refuse():
    traced = trace_problem(load_problem(text=UNROLLED_RNN, name="unrolled_rnn"))
    targets = [n.target for n in traced.graph_module.graph.nodes if n.op == "call_method"]
    assert "size" not in targets and "dim" not in targets
    with pytest.raises(Exception, match="control flow"):
        trace_problem(load_problem(text=DATA_DEPENDENT, name="data_dependent"))


def test_a_forward_that_assigns_its_state_keeps_the_model_and_the_in_place_copy(tmp_path):
    problem = load_problem(text=STATEFUL_CELL, name="stateful_cell")
    traced = trace_problem(problem)
    assert type(traced.graph_module.hidden) is torch.Tensor  # not the proxy the forward assigned
    generated = generate(problem)
    assert "hidden.copy_(initial_hidden)" in solution_part(generated.text)  # read by nothing, kept for its effect
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"] == 2, result


def test_masked_fill_with_a_broadcast_boolean_mask_is_elementwise(tmp_path):
    generated = generate(load_problem(text=MASKED_POINTWISE, name="masked"))
    # the comparison that makes the mask is a kernel of its own (a boolean output joins no float chain)
    assert generated.kernels == ["relu_masked_fill_mul_kernel", "gt_kernel"] and not generated.fallbacks
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"] == 2, result


def test_f_normalize_is_a_fused_row_normalization(tmp_path):
    generated = generate(load_problem(text=L2_NORMALIZED, name="l2_normalized"))
    assert not generated.fallbacks and "normalize" in generated.op_classes
    forward = solution_part(generated.text).split("def forward", 1)[1]
    assert forward.count("run_norm_clamp_div(") == 2  # q and k: one kernel, written once
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"] == 2, result
