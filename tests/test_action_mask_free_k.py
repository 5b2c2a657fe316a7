"""mask_free_k: offered on masked tl.dot K loops (after tiling), refused with a reason elsewhere, equivalent in the interpreter."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from mtmc_lsp.cli import main
from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy
from mtmc_lsp.optimizer.search import optimize

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import job, run_jobs  # noqa: E402
from test_search import ScriptedVerifier, report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H200 = get_profile("h200")
ACTION = ACTIONS["mask_free_k"]
TITLE = "Take the masks out of the K loop (wrap rows/cols, EVEN_K)"
PRELUDE = "import torch\nimport triton\nimport triton.language as tl\n\n\n"
BEFORE = PRELUDE + re.search(r"```python before\n(.*?)```", sys.modules[type(ACTION).__module__].__doc__, re.S).group(1)
SUITE = {
    "matmul": (ROOT / "mtmc_lsp/examples/matmul.py", "matmul_kernel"),
    "matmul_transposed": (ROOT / "benchmarks/suite/matmul_transposed.py", "matmul_bt_kernel"),
    "linear_gelu": (ROOT / "benchmarks/suite/linear_gelu.py", "linear_kernel"),
    "bmm": (ROOT / "benchmarks/suite/bmm.py", "bmm_kernel"),
}

# The tutorial's loop before its wrap: pointers set before the loop and stepped by BLOCK_K, a cdiv loop whose K mask
# is `offs_k < K - k * BLOCK_K`, a store through its own offsets, literal blocks at the launch.
TUTORIAL = PRELUDE + '''@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=16, BLOCK_N=32, BLOCK_K=16)
    return c


ENTRY = "matmul"


def get_inputs(device: str = "cuda", m: int = 20, n: int = 36, k: int = 48):
    return [torch.randn(m, k, device=device, dtype=torch.float16), torch.randn(k, n, device=device, dtype=torch.float16)]


def reference(a, b):
    return (a.float() @ b.float()).half()
'''


# The same loop spelled otherwise: tl.range with stages, a K remainder named in the loop, a cast after the load, `other=0`,
# the loads apart (each gets its own branch).
TUTORIAL_SPELLED = TUTORIAL.replace(
    "for k in range(0, tl.cdiv(K, BLOCK_K)):", "for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=2):").replace(
    "        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)\n",
    "        k_remaining = K - k * BLOCK_K\n"
    "        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_remaining), other=0).to(tl.float16)\n"
    "        a_ptrs += BLOCK_K * stride_ak\n").replace(
    "        accumulator = tl.dot(a, b, accumulator)\n        a_ptrs += BLOCK_K * stride_ak\n",
    "        accumulator = tl.dot(a, b, accumulator)\n")


def offered(text: str, kernel: str):
    return [cand for cand in applicable(analyze(text), kernel, H200) if cand.action == "mask_free_k"]


def apply(text: str, kernel: str, **params) -> str:
    cand = next(cand for cand in offered(text, kernel) if cand.params == params)
    return apply_candidate(text, cand, H200).new_text


def why_refused(text: str, kernel: str = "mm_kernel") -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        ACTION._plan(c.parse(text), analysis, analysis.kernel(kernel))
    return str(caught.value)


def with_k(text: str, old: str, new: str) -> str:
    """``text`` with one harness size changed (the interpreter runs get_inputs' defaults)."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_the_tutorial_loop_wraps_in_place_and_the_launch_computes_even_k():
    new = apply(TUTORIAL, "matmul_kernel")
    # Only the loads read offs_m / offs_n (the store has offs_cm / offs_cn): wrapped where they are set.
    assert "offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M" in new
    assert "offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N" in new
    assert "            a = tl.load(a_ptrs)\n            b = tl.load(b_ptrs)\n        else:\n" in new
    assert "a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)" in new
    assert "BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, EVEN_K=K % 16 == 0)" in new
    assert "mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))" in new  # the store keeps its mask
    # tiling cannot move a block of unmasked loads, so the step comes after it
    assert not [cand for cand in applicable(analyze(new), "matmul_kernel", H200) if cand.action == "tiling"]


def test_other_spellings_of_the_loop():
    new = apply(TUTORIAL_SPELLED, "matmul_kernel")
    assert "        if EVEN_K:\n            a = tl.load(a_ptrs).to(tl.float16)\n        else:\n" \
           "            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_remaining, other=0).to(tl.float16)\n" \
           "        a_ptrs += BLOCK_K * stride_ak\n        if EVEN_K:\n            b = tl.load(b_ptrs)\n" in new


def test_offsets_the_store_also_reads_get_a_new_wrapped_name():
    new = apply(BEFORE, "mm_kernel")
    assert "ram = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)) % M" in new
    assert "tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))" in new


def test_autotuned_kernels_get_even_k_from_a_heuristic_below_the_autotuner():
    tuned = kernel_path("matmul_autotuned").read_text()
    new = apply(tuned, "mm_autotuned_kernel")
    assert ')\n@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})\n@triton.jit\n' in new
    assert "EVEN_K=" not in new.split("def matmul_autotuned", 1)[1]


@pytest.mark.parametrize("name", sorted(SUITE))
def test_mtmc_actions_runs_on_the_suite_and_offers_it_after_tiling(name, capsys):
    path, kernel = SUITE[name]
    assert main(["actions", str(path), "--target", "h200", "--json"]) == 0
    assert kernel in json.loads(capsys.readouterr().out)["kernels"]
    text = path.read_text()
    tiling = next(cand for cand in applicable(analyze(text), kernel, H200) if cand.action == "tiling")
    tiled = apply_candidate(text, tiling, H200).new_text
    titles = [cand.title for cand in offered(tiled, kernel)]
    assert titles[0] == TITLE
    # grouped order comes with it as one step where reordering applies (bmm's third grid axis: it does not)
    assert (f"{TITLE} with grouped program order (GROUP_M=8)" in titles) == (name != "bmm")
    new = apply(tiled, kernel)
    assert "if EVEN_K:" in new and "EVEN_K=K % BLOCK_K == 0" in new  # the suite's blocks are host constants


def test_reordering_still_applies_after_it_and_it_after_reordering():
    text = SUITE["matmul"][0].read_text()
    reorder = next(cand for cand in applicable(analyze(text), "matmul_kernel", H200) if cand.action == "reordering")
    grouped = apply_candidate(text, reorder, H200).new_text
    assert [cand.params for cand in offered(grouped, "matmul_kernel")] == [{}]  # grouped already: no variant
    unmasked = apply(text, "matmul_kernel")
    assert any(cand.action == "reordering" for cand in applicable(analyze(unmasked), "matmul_kernel", H200))
    assert offered(unmasked, "matmul_kernel") == []  # EVEN_K is there
    # the GROUP_M variant is exactly reordering followed by the plain step
    assert apply(text, "matmul_kernel", GROUP_M=8) == apply(grouped, "matmul_kernel")


@pytest.mark.parametrize("change, why", [
    (("mask=(rm[:, None] < M) & ((k + rk)[None, :] < K)", "mask=(rm[:, None] < M) & ((k + rk)[None, :] < K) & (rm[:, None] >= 0)"),
     "the mask of a is not a row part and a K part"),
    (("mask=(rm[:, None] < M) & ((k + rk)[None, :] < K)", "mask=(rm[:, None] < M) & ((k + rk)[None, :] < K - 1)"),
     "the mask of a is not a row part and a K part"),
    (("mask=((k + rk)[:, None] < K) & (rn[None, :] < N)", "mask=((k + rk)[:, None] < K) & (rn[:, None] < N)"),
     "the mask of b is not a column part and a K part"),
    (("mask=(rm[:, None] < M) & ((k + rk)[None, :] < K)", "mask=(rm[:, None] < M) | ((k + rk)[None, :] < K)"),
     "the mask of a is not a row part"),
    (("for k in range(0, K, BLOCK_K):", "for k in range(0, K, 16):"), "does not step a size argument by a constexpr block"),
    (("for k in range(0, K, BLOCK_K):", "for k in range(0, K * 2, BLOCK_K):"), "does not step a size argument"),
    (("        acc += tl.dot(a, b)\n", "        acc += tl.dot(a, b)\n        acc = acc * 0.5\n"), "used in the K loop besides"),
    (("        acc += tl.dot(a, b)\n", "        acc += tl.dot(a, b)\n        if k > 0:\n            acc += 1.0\n"),
     "only the A/B loads, their pointers and the tl.dot"),
    (("tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,", "tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc - tl.max(acc, 0)[None, :],"),
     "`tl.max`"),
    (("mask=(rm[:, None] < M) & (rn[None, :] < N))", "mask=rn[None, :] < N)"), "not masked on the same row and column offsets"),
    (("a_ptr + rm[:, None] * K", "a_ptr + tl.program_id(0) * 0 + rm[:, None] * K"), "reads program_id(0) besides rm"),

    (("((k + rk)[None, :] < K), other=0.0)\n", "(rk[None, :] < k_left), other=0.0)\n        k_left = K - k\n"),
     "the mask of a is not a row part and a K part"),  # the remainder is set after the load: last iteration's
    (("    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,", "    acc = gelu(acc)\n    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,"),
     "the accumulator goes through `gelu`"),
    (("BLOCK_K: tl.constexpr):", "BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr = True):"), "already has EVEN_K"),
])
def test_refused_with_a_reason(change, why):
    text = BEFORE.replace(*change)
    assert text != BEFORE
    assert why in why_refused(text)
    assert offered(text, "mm_kernel") == []
    assert why in ACTION.why_not(analyze(text), analyze(text).kernel("mm_kernel"), H200)


def test_offsets_read_through_another_name_are_refused():
    """Only the offsets a pointer names are wrapped: rows reached through `a_rows` would stay unwrapped and unmasked."""
    text = BEFORE.replace("    rk = tl.arange(0, BLOCK_K)\n", "    rk = tl.arange(0, BLOCK_K)\n    a_rows = a_ptr + rm[:, None] * K\n")
    text = text.replace("a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=", "a_rows + (k + rk)[None, :] + 0 * rm[:, None], mask=")
    assert "reads rm through another name" in why_refused(text)


def test_the_heuristic_loop_takes_grouped_order_and_persistent_tiles_before_the_unmasked_loop():
    """After tiling (whose tiles come with 3 stages), grouped order alone comes first where the grid has two axes
    (the engine's edits on the H200: 0.96-1.12x, the grouped unmasked loop 0.93-1.02x), then persistent tiles, which
    pay with TMA loads that the unmasked loop's branches refuse (persistent_ablation/); bmm (a 3-D grid, no grouped
    order) gets persistent tiles and their TMA loads."""
    verify = ScriptedVerifier(lambda new, old: report(speedup=1.1))
    for name, route in (("matmul", ["tiling", "reordering", "persistent"]),
                        ("matmul_transposed", ["tiling", "reordering", "persistent"]),
                        ("bmm", ["tiling", "persistent", "tensor_descriptor"])):
        path, kernel = SUITE[name]
        result = optimize(path.read_text(), str(path), kernel, H200, HeuristicPolicy(), verify, steps=3, beam=1)
        assert [s.candidate.action for s in result.steps] == route, name
        if name != "bmm":
            assert result.steps[1].candidate.params == {"GROUP_M": 8}


def test_a_pipelining_step_does_not_demote_it():
    state_text = SUITE["matmul"][0].read_text()
    analysis = analyze(state_text)
    policy = HeuristicPolicy()
    from mtmc_lsp.optimizer.policy.base import PolicyState, StepOutcome

    stages = next(cand for cand in applicable(analysis, "matmul_kernel", H200) if cand.action == "pipelining")
    kept = StepOutcome(stages, True, True, 1.2, 0.6, True)
    alone, grouped = offered(state_text, "matmul_kernel")
    before = policy.score(PolicyState(analysis, analysis.kernel("matmul_kernel"), H200), grouped)[0]
    after = policy.score(PolicyState(analysis, analysis.kernel("matmul_kernel"), H200, [kept]), grouped)[0]
    assert before == after == 0.66
    reorder = next(cand for cand in applicable(analysis, "matmul_kernel", H200) if cand.action == "reordering")
    assert policy.score(PolicyState(analysis, analysis.kernel("matmul_kernel"), H200), reorder)[0] > \
        policy.score(PolicyState(analysis, analysis.kernel("matmul_kernel"), H200), alone)[0]


def test_the_compile_diagnostics_plan_the_masked_branch_of_a_launch_computed_even_k():
    from mtmc_lsp.optimizer.compile.plan import plan_jobs

    (planned,) = plan_jobs(analyze(apply(TUTORIAL, "matmul_kernel")), H200)
    assert planned.job.constexprs["EVEN_K"] is False and planned.job.constexprs["BLOCK_K"] == 16


@pytest.mark.slow
def test_both_branches_compile_for_hopper_without_spills():
    """The interpreter does not check what the compiler does: both EVEN_K branches, grouped, at the suite's tile."""
    from mtmc_lsp.optimizer.compile.compiler import CompileJob, compile_jobs

    path, kernel = SUITE["matmul"]
    text = path.read_text()
    tiling = next(cand for cand in applicable(analyze(text), kernel, H200)
                  if cand.action == "tiling" and cand.params.get("BLOCK_N") == 256)
    new = apply(apply_candidate(text, tiling, H200).new_text, kernel, GROUP_M=8)
    blocks = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}
    jobs = [CompileJob(kernel, {**blocks, "EVEN_K": even}, num_warps=8, num_stages=3) for even in (True, False)]
    for compiled in compile_jobs(new, jobs, H200, cache_dir=None):
        assert compiled.status == "ok" and compiled.spills == 0, (compiled.status, compiled.error)


@pytest.mark.slow
def test_outputs_stay_identical_in_the_interpreter(tmp_path):
    """M and N not multiples of the blocks; K a multiple of BLOCK_K (the unmasked branch) and not (the K mask)."""
    exact = (0.0, 0.0)  # the kept rows and columns load the same values in the same order
    transposed = SUITE["matmul_transposed"][0].read_text() + '\nENTRY = "matmul_transposed"  # what the runner calls\n'
    tuned = kernel_path("matmul_autotuned").read_text()
    cases = [
        # literal launch blocks 16 x 32 x 16, M = 20, N = 36
        ("tutorial", TUTORIAL, "matmul_kernel", ("k: int = 48", "k: int = 40")),
        ("spelled", TUTORIAL_SPELLED, "matmul_kernel", ("k: int = 48", "k: int = 40")),
        # B stored (N, K) and read through its strides; host-constant blocks 32, M = 40, N = 56
        ("transposed", with_k(transposed, '"cpu": {"m": 64, "n": 48, "k": 80}', '"cpu": {"m": 40, "n": 56, "k": 64}'),
         "matmul_bt_kernel", ('"k": 64}', '"k": 80}')),
        # @triton.autotune, both configs BLOCK_K=16 (the runner forces each), M = 40, N = 56
        ("autotuned", tuned, "mm_autotuned_kernel", ("k: int = 48", "k: int = 40")),
    ]
    jobs = []
    for name, text, kernel, (even, odd) in cases:
        for params in ({}, {"GROUP_M": 8}):
            new = apply(text, kernel, **params)
            for label, k_size in (("even", even), ("odd", odd)):
                jobs.append(job(tmp_path, f"{name}:{label}:{params}", with_k(text, even, k_size), with_k(new, even, k_size),
                                exact))
    assert len(jobs) == 16
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
