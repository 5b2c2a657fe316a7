"""split_k: offered on plain tl.dot K loops, refused with a reason elsewhere, and equivalent in the interpreter."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import job, run_jobs  # noqa: E402

H100 = get_profile("h100")
SPLIT = ACTIONS["split_k"]
DOC = SPLIT.__module__ and sys.modules[type(SPLIT).__module__].__doc__
BEFORE = re.search(r"```python before\n(.*?)```", DOC, re.S).group(1)
HARNESS = '''

ENTRY = "mm"


def get_inputs(device: str = "cuda", m: int = 40, n: int = 48, k: int = 200):
    return [torch.randn(m, k, device=device, dtype=torch.float16), torch.randn(k, n, device=device, dtype=torch.float16)]


def reference(a, b):
    return (a.float() @ b.float()).to(torch.float16)
'''
SKINNY = "import torch\nimport triton\nimport triton.language as tl\n\n\n" + BEFORE + HARNESS


def why_refused(text: str, kernel: str = "mm_kernel") -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        SPLIT._plan(c.parse(text), analysis, analysis.kernel(kernel))
    return str(caught.value)


def test_offered_on_the_pointer_stepping_and_the_k_indexed_loops():
    assert {cand.params["SPLIT_K"] for cand in applicable(analyze(SKINNY), "mm_kernel", H100)
            if cand.action == "split_k"} == {2, 4, 8}
    matmul = kernel_path("matmul").read_text()  # `for k in range(0, K, BLOCK_K)`, k in the masks
    cand = next(cand for cand in applicable(analyze(matmul), "matmul_kernel", H100) if cand.action == "split_k")
    new = apply_candidate(matmul, cand, H100).new_text
    assert "for k in range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K):" in new
    assert "torch.zeros((M, N)" in new and "(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N), 4)" in new
    assert "tl.atomic_add(" in new and "tl.store(" not in new.split("def matmul(")[0]


@pytest.mark.parametrize("change, why", [
    (("acc.to(tl.float16)", "tl.maximum(acc, 0.0).to(tl.float16)"), "transformed after the K loop"),
    (("torch.empty((M, N)", "torch.randn((M, N)"), "not allocated with torch.empty"),
    (("        acc += tl.dot(a, b)\n", "        acc += tl.dot(a, b)\n        rm = rm + 0 * k\n"), "carried across K"),
    (("        acc += tl.dot(a, b)\n", "        acc += tl.dot(a, b) * k\n"), None),
    (("    tl.store(", "    acc += a.to(tl.float32)\n    tl.store("), "last of the K iterations"),
    (("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
      "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + 1.0\n"), "does not start at zero"),
    (("    tl.store(", "    tl.store(c_ptr, acc.to(tl.float16))\n    tl.store("), "exactly one tl.store"),
    (("mm_kernel[grid](a, b, c,", "mm_kernel[grid](a, b, c,"), None),
    (("    pid_n = tl.program_id(1)\n", "    pid_n = tl.program_id(1)\n    first = tl.load(c_ptr)\n"), "reads c_ptr"),
    (("grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))", "grid = (triton.cdiv(M, 32), triton.cdiv(N, 32), 1)"),
     "one or two axes"),
])
def test_refused_with_a_reason(change, why):
    text = SKINNY.replace(*change)
    assert text != SKINNY or why is None
    if why is None:
        assert any(cand.action == "split_k" for cand in applicable(analyze(text), "mm_kernel", H100))
    else:
        assert why in why_refused(text)


def test_a_caller_allocated_output_is_refused():
    text = SKINNY.replace("def mm(a, b):", "def mm(a, b, c=None):").replace(
        "    c = torch.empty((M, N), device=a.device, dtype=torch.float16)\n", "")
    assert "not allocated with torch.empty" in why_refused(text)


def test_an_autotuned_kernel_gets_split_k_in_every_config_and_a_zeroing_autotuner():
    tuned = kernel_path("matmul_autotuned").read_text()
    cand = next(cand for cand in applicable(analyze(tuned), "mm_autotuned_kernel", H100) if cand.action == "split_k")
    new = apply_candidate(tuned, cand, H100).new_text
    assert new.count('"SPLIT_K": 4}') == 2 and 'reset_to_zero=["c_ptr"]' in new  # timed runs add into c too
    assert 'META["SPLIT_K"])' in new and "SPLIT_K=" not in new.split("def matmul_autotuned", 1)[1]
    fixed_grid = tuned.replace('grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))',
                               "grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))")
    assert "grid must be a lambda" in why_refused(fixed_grid, "mm_autotuned_kernel")


@pytest.mark.slow
def test_split_k_stays_equivalent(tmp_path):
    tol = (1e-2, 1e-2)
    matmul = kernel_path("matmul").read_text()
    jobs = []
    for name, text, kernel in (("skinny", SKINNY, "mm_kernel"), ("matmul", matmul, "matmul_kernel")):
        for cand in applicable(analyze(text), kernel, H100):
            if cand.action == "split_k" and cand.params["SPLIT_K"] in (2, 8):
                jobs.append(job(tmp_path, f"{name}:{cand.key()}", text, apply_candidate(text, cand, H100).new_text, tol))
    assert len(jobs) == 4
    tuned = kernel_path("matmul_autotuned").read_text()
    cand = next(cand for cand in applicable(analyze(tuned), "mm_autotuned_kernel", H100) if cand.action == "split_k")
    split = apply_candidate(tuned, cand, H100).new_text
    # Each config runs alone here (the interpreter has no timer), so this checks the split, not
    # reset_to_zero: without it only a GPU's autotuner adds its timed runs into the output.
    jobs.append(job(tmp_path, "autotuned:split_k", tuned, split, tol))
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]


def test_a_half_precision_output_sums_in_an_fp32_workspace():
    """Atomic adds into fp16 round every partial sum (the H200 verifier rejected an 8192^3 fp16 split): the
    partial tiles add up in fp32, cast once after the launch; an fp32 output is added into directly."""
    cand = next(cand for cand in applicable(analyze(SKINNY), "mm_kernel", H100) if cand.action == "split_k")
    new = apply_candidate(SKINNY, cand, H100).new_text
    assert "c = torch.zeros((M, N), device=a.device, dtype=torch.float32)" in new
    assert "SPLIT_K=4)\n    c = c.to(torch.float16)\n    return c" in new.replace(f"SPLIT_K={cand.params['SPLIT_K']})", "SPLIT_K=4)")
    assert "acc.to(tl.float16)" not in new  # the fp32 partial tile itself is added
    fp32 = SKINNY.replace("dtype=torch.float16)", "dtype=torch.float32)").replace("acc.to(tl.float16)", "acc")
    direct = apply_candidate(fp32, cand, H100).new_text
    assert "c = torch.zeros((M, N), device=a.device, dtype=torch.float32)" in direct
    assert "c = c.to(" not in direct
    used = SKINNY.replace("    grid = (triton.cdiv(M, 32)", "    c.fill_(0)\n    grid = (triton.cdiv(M, 32)")
    assert used != SKINNY and "used between its allocation and the launch" in why_refused(used)
