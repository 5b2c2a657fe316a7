"""Harness discovery and the get_inputs() scaffold (static: nothing is imported or run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.verify import Harness, HarnessMissing, discover_harness, scaffold_get_inputs

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n), mask=offs < n)


def _launch(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out
'''


def test_examples_use_function_style_with_reference():
    expected = {"matmul": ("matmul", 2), "softmax": ("softmax", 1), "gelu_bias": ("gelu_bias", None)}  # a list comprehension: count unknown
    for name, (entry, count) in expected.items():
        text = (EXAMPLES / f"{name}.py").read_text()
        h = discover_harness(text, f"{name}.py")
        assert isinstance(h, Harness), h
        assert (h.style, h.entry, h.reference, h.inputs, h.input_count) == ("function", entry, "reference", "get_inputs", count)
        assert text.splitlines()[h.line].startswith(f"def {entry}(")


def test_kernelbench_style_prefers_modelnew_and_uses_model_as_reference():
    text = KERNEL + '''
class Model(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return _launch(x, y)


def get_inputs():
    return [torch.randn(8), torch.randn(8)]


def get_init_inputs():
    return []
'''
    h = discover_harness(text)
    assert (h.style, h.entry, h.reference, h.init_inputs) == ("kernelbench", "ModelNew", "Model", "get_init_inputs")
    only_model = text.replace("class ModelNew", "class Other")
    h = discover_harness(only_model)
    assert (h.style, h.entry, h.reference) == ("kernelbench", "Model", None)
    assert h.notes  # says it can only compare with the previous version


def test_kernelbench_solution_without_inputs_needs_the_problem_file():
    solution = KERNEL + '''
class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return _launch(x, y)
'''
    missing = discover_harness(solution)
    assert isinstance(missing, HarnessMissing) and "--problem" in missing.reason
    assert solution.splitlines()[missing.line].startswith("class ModelNew(")
    problem = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n\n\n" \
              "def get_inputs():\n    return [torch.randn(8), torch.randn(8)]\n"
    h = discover_harness(solution, problem_text=problem)
    assert (h.style, h.entry, h.reference, h.init_inputs, h.input_count) == ("kernelbench", "ModelNew", "Model", None, 2)


def test_function_style_picks_the_outer_wrapper_not_the_helper():
    text = KERNEL + '''

def add(x, y):
    return _launch(x, y)


def get_inputs(device="cpu"):
    return [torch.randn(8, device=device), torch.randn(8, device=device)]
'''
    h = discover_harness(text)
    assert (h.style, h.entry, h.reference) == ("function", "add", None)
    assert discover_harness(text, entry="_launch").entry == "_launch"


def test_test_style_lists_module_level_tests():
    text = KERNEL + '''

def test_small():
    return _launch(torch.ones(4), torch.ones(4))


def test_dict():
    return {"a": _launch(torch.ones(4), torch.ones(4))}
'''
    h = discover_harness(text)
    assert (h.style, h.tests) == ("test", ["test_small", "test_dict"])


def test_missing_get_inputs_gives_reason_line_and_a_scaffold_that_completes_the_harness():
    text = (EXAMPLES / "gelu_bias.py").read_text()
    stripped = text[: text.index("def get_inputs")].rstrip() + "\n"
    missing = discover_harness(stripped)
    assert isinstance(missing, HarnessMissing)
    assert "get_inputs" in missing.reason and "gelu_bias(x, w, b)" in missing.reason
    assert stripped.splitlines()[missing.line].startswith("def gelu_bias(")
    scaffold = missing.scaffold
    assert scaffold is not None and scaffold.function == "gelu_bias"
    patched = _apply(stripped, scaffold.edits)
    ast.parse(patched)
    h = discover_harness(patched)
    assert isinstance(h, Harness) and (h.style, h.entry, h.input_count) == ("function", "gelu_bias", 3)


def test_scaffold_reads_shapes_and_scalars_from_the_signature():
    text = '''import torch


def mm(a, b, alpha: float, n_iters: int):
    M, K = a.shape
    K2, N = b.shape
    return a @ b
'''
    scaffold = scaffold_get_inputs(text, "mm")
    code = scaffold.edits[-1]["text"]
    assert "a = torch.randn(size, size" in code and "b = torch.randn(size, size" in code
    assert "alpha = 1.0" in code and "n_iters = n" in code
    assert len(scaffold.edits) == 1  # torch is already imported
    namespace: dict = {}
    exec(compile(_apply(text, scaffold.edits), "<scaffold>", "exec"), namespace)
    inputs = namespace["get_inputs"](device="cpu")
    assert [tuple(t.shape) for t in inputs[:2]] == [(256, 256), (256, 256)]
    assert inputs[2:] == [1.0, 4096]


def test_scaffold_adds_the_torch_import_when_missing():
    text = "import triton\n\n\ndef run(x):\n    return x\n"
    scaffold = scaffold_get_inputs(text, "run")
    assert scaffold.edits[0] == {"line": 0, "character": 0, "text": "import torch\n"}


def test_missing_cases_have_specific_reasons():
    assert "does not parse" in discover_harness("def broken(:\n").reason
    assert "nothing to verify" in discover_harness("x = 1\n").reason
    never_launched = KERNEL[: KERNEL.index("def _launch")]
    reason = discover_harness(never_launched).reason
    assert "add_kernel" in reason and "never launched" in reason
    inputs_only = never_launched + "\n\ndef get_inputs():\n    return []\n"
    assert "no function that launches a kernel" in discover_harness(inputs_only).reason


def _apply(text: str, edits: list[dict]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e["line"], reverse=True):
        assert edit["character"] == 0
        lines.insert(edit["line"], edit["text"])
    return "".join(lines)


MAIN_BLOCK = '''import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def softmax(x):
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(37, 100, device=device)
    y = softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=1))
    print("max error", (y - torch.softmax(x, dim=1)).abs().max().item())
    triton.testing.do_bench(lambda: softmax(x))
'''


def test_a_main_block_is_the_harness_of_a_file_without_another():
    """A kernel file tried out the common way, ``if __name__ == "__main__":`` at its end, verifies as it is."""
    from mtmc_lsp.optimizer.verify.runtime.names import MAIN_TEST

    found = discover_harness(MAIN_BLOCK)
    assert found.style == "test" and found.tests == [MAIN_TEST] and found.self_checking == [MAIN_TEST]
    assert "__main__" in found.describe() and found.line == MAIN_BLOCK.splitlines().index('if __name__ == "__main__":')
    unchecked = discover_harness(MAIN_BLOCK.replace("    torch.testing.assert_close(y, torch.softmax(x, dim=1))\n", ""))
    assert unchecked.tests == [MAIN_TEST] and unchecked.self_checking == []
    # It calls nothing of the file: no harness from it.
    no_call = MAIN_BLOCK.replace("y = softmax(x)", "y = torch.softmax(x, dim=1)").replace("softmax(x))\n", "x)\n")
    assert isinstance(discover_harness(no_call), HarnessMissing)
    # get_inputs() or test_*() functions come first.
    with_test = MAIN_BLOCK.replace('if __name__ == "__main__":', 'def test_softmax():\n    return softmax(torch.randn(4, 8))\n\n\n'
                                   'if __name__ == "__main__":')
    assert discover_harness(with_test).tests == ["test_softmax"]


@pytest.mark.slow
def test_a_main_block_judges_a_wrong_kernel():
    from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file

    options = VerifyOptions(compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    assert verify_file(MAIN_BLOCK, None, "softmax.py", "h100", options).status == "verified"
    wrong = MAIN_BLOCK.replace("e / tl.sum(e, axis=0)", "e / (tl.sum(e, axis=0) + 0.5)")
    assert verify_file(wrong, MAIN_BLOCK, "softmax.py", "h100", options).status == "incorrect"  # its own assert
    quiet = MAIN_BLOCK.replace("    torch.testing.assert_close(y, torch.softmax(x, dim=1))\n", "")
    report = verify_file(quiet.replace("e / tl.sum(e, axis=0)", "e / (tl.sum(e, axis=0) + 0.5)"), quiet, "softmax.py",
                         "h100", options)
    assert report.status == "incorrect" and "output['y']" in report.summary  # the tensors it binds, against the previous
    assert verify_file(quiet, quiet, "softmax.py", "h100", options).status == "verified"
