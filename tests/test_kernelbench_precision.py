"""KernelBench numerics on the GPU that the interpreter cannot show: every fp32 tl.dot names its precision, the
TF32-off second reference, and a max-diff that does not allocate indices on the largest outputs."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mtmc_lsp.optimizer.kernelbench.evaluate import ProblemResult, apply_result, summarize  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.report import render_markdown  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.trace import load_problem  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.write import generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "optimizer" / "kernelbench"))
sys.path.insert(0, str(ROOT / "tests"))
import runner  # noqa: E402
from test_kernelbench import OP_PROBLEMS, _problem_text  # noqa: E402

DOT_CASES = ["conv_1d_3d_transposed_grouped", "conv2d_strided", "conv_window_outer", "matmul_flatten_transposed"]
DOT_FILES = ["level1/1_Matmul.py", "level2/3_BMM_Softmax.py", "level2/4_Conv2d_ReLU_BiasAdd.py"]


def _dots(text: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)
            and ast.unparse(node.func) == "tl.dot"]


@pytest.mark.parametrize("fp32_dot", ["tf32x3", "ieee"])
def test_every_fp32_dot_names_its_input_precision(fp32_dot):
    """On a GPU a bare fp32 tl.dot is TF32 (about 5e-4 relative, over KernelBench's 1e-4); the interpreter computes it
    exactly, so only the text shows it."""
    problems = [load_problem(text=_problem_text(OP_PROBLEMS[case][0]), name=case) for case in DOT_CASES]
    problems += [load_problem(ROOT / "tests" / "kernelbench_problems" / path) for path in DOT_FILES]
    for problem in problems:
        dots = _dots(generate(problem, fp32_dot=fp32_dot).text)
        assert dots, problem.name
        for dot in dots:
            precision = {k.arg: ast.literal_eval(k.value) for k in dot.keywords}.get("input_precision")
            assert precision == fp32_dot, (problem.name, ast.unparse(dot))


def test_max_abs_diff_skips_non_finite_and_never_indexes_by_mask():
    """``diff[torch.isfinite(diff)]`` runs nonzero(): 64 GiB of int64 indices for a 2**31-element 4-D output."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    expected = torch.tensor([[1.0, float("nan")], [float("inf"), 4.0]]).view(1, 2, 2, 1)
    actual = torch.tensor([[1.5, 0.0], [float("inf"), 3.0]]).view(1, 2, 2, 1)
    with Record():
        value = runner.max_abs_diff(expected, actual)
    assert value == 1.0
    assert not [op for op in seen if "nonzero" in op or "index" in op], seen
    assert runner.max_abs_diff(torch.zeros(0), torch.zeros(0)) == 0.0
    assert runner.max_abs_diff(torch.tensor([float("nan")]), torch.tensor([1.0])) == 0.0


def test_tf32_off_sets_ieee_inside_and_restores_the_settings():
    conv, matmul = torch.backends.cudnn.conv, torch.backends.cuda.matmul
    before = conv.fp32_precision, matmul.fp32_precision
    with runner.tf32_off():
        assert (conv.fp32_precision, matmul.fp32_precision) == ("ieee", "ieee")
    assert (conv.fp32_precision, matmul.fp32_precision) == before
    # the new API only: reading the legacy flag raises after the two APIs were mixed
    assert isinstance(torch.backends.cudnn.allow_tf32, bool)


class _TF32Problem:
    """A reference whose result moves by 1e-3 while cuDNN convolutions may use TF32, as a GPU's conv does."""

    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 2 + (1e-3 if torch.backends.cudnn.conv.fp32_precision == "tf32" else 0.0)

    @staticmethod
    def get_inputs():
        return [torch.randn(4, 8)]

    @staticmethod
    def get_init_inputs():
        return []


class _Exact:
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return x * 2


def test_a_tf32_reference_fails_kernelbench_and_passes_the_fp32_reference():
    if torch.backends.cudnn.conv.fp32_precision != "tf32":
        pytest.skip("torch's default here does not allow TF32 convolutions")
    result = runner.check_correctness(_TF32Problem, _Exact, "cpu", trials=2, fp32_reference=True)
    assert result["passed"] == 0 and result["passed_fp32_reference"] == 2, result
    assert result["reference_tf32_max_diff"] == pytest.approx(1e-3, rel=1e-2)
    assert result["max_abs_diff_fp32_reference"] == 0.0
    # on the CPU by default: one reference, the two counts agree
    plain = runner.check_correctness(_TF32Problem, _Exact, "cpu", trials=1)
    assert plain["passed"] == plain["passed_fp32_reference"] == 0 and plain["reference_tf32_max_diff"] is None


def test_rows_right_only_against_the_fp32_reference_are_scored_apart():
    result = {"status": "ok", "correct": False, "correct_fp32_reference": True, "device_name": "gpu",
              "correctness": {"trials": 5, "passed": 0, "passed_fp32_reference": 5, "max_abs_diff": 5e-4,
                              "max_abs_diff_fp32_reference": 2e-6, "reference_tf32_max_diff": 5e-4,
                              "issue": "trial 0: values differ beyond 0.0001"},
              "timing": {"eager_ms": 2.0, "compile_ms": 4.0, "triton_ms": 1.0}}
    conv = apply_result(ProblemResult(1, "56_conv", "pending"), result)
    assert not conv.correct and conv.correct_fp32_reference and conv.trials_passed_fp32_reference == 5
    assert conv.speedup("eager") is None and conv.speedup("eager", "fp32") == 2.0
    exact = ProblemResult(1, "1_Matmul", "ok", correct=True, correct_fp32_reference=True, eager_ms=1.0,
                          compile_ms=1.0, triton_ms=2.0)
    level = summarize([conv, exact])["level1"]
    assert (level["correct"], level["correct_fp32_reference"]) == (1, 2)
    assert level["all"]["eager"]["fast_1"] == 0.0 and level["all_fp32_reference"]["eager"]["fast_1"] == 0.5
    text = render_markdown([conv, exact], {})
    assert "| level1/56_conv | ok | 0/5 | 5/5 (refs differ 5.0e-04) |" in text and "2.00x*" in text


def test_rows_of_an_earlier_runner_leave_the_fp32_reference_unscored():
    """Rows written before the TF32-off check (the first H200 sample) must not read as 0 correct against it."""
    old = apply_result(ProblemResult(1, "56_conv", "pending"), {
        "status": "ok", "correct": False, "correctness": {"trials": 5, "passed": 0, "max_abs_diff": 5e-4}})
    crashed = apply_result(ProblemResult(1, "87_conv", "pending"), {"status": "error", "error": "OutOfMemoryError"})
    assert old.correct_fp32_reference is None and crashed.correct_fp32_reference is None
    level = summarize([old, crashed])["level1"]
    assert level["correct_fp32_reference"] is None and "all_fp32_reference" not in level
    assert "0 correct (- against the TF32-off reference)" in render_markdown([old, crashed], {})
    new = apply_result(ProblemResult(1, "62_conv", "pending"), {
        "status": "ok", "correct": False, "correct_fp32_reference": True,
        "correctness": {"trials": 5, "passed": 0, "passed_fp32_reference": 5}})
    assert summarize([new, crashed])["level1"]["correct_fp32_reference"] == 1


def test_the_command_line_of_a_row_right_only_against_the_fp32_reference_shows_its_speed():
    from mtmc_lsp.commands.kernelbench import _line

    row = ProblemResult(1, "56_conv", "ok", trials=5, correct_fp32_reference=True, trials_passed_fp32_reference=5,
                        eager_ms=1.0, compile_ms=2.0, triton_ms=2.0)
    assert _line(row) == ("level1/56_conv: INCORRECT 0/5 (against the TF32-off reference 5/5), 2.000 ms: "
                          "0.50x eager, 1.00x compile")
