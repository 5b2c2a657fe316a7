"""channel_tile: a loop over the channels that loads one position vector per channel becomes one 2-D tile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy import HeuristicPolicy, PolicyState

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

from corpus.kernels import kernel_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H100, H200 = get_profile("h100"), get_profile("h200")
DEV_RMS = ROOT / "benchmarks" / "wild" / "dev" / "norm_rmsnorm_kernelbench.py"
CHANNEL_NORM = kernel_path("channel_norm").read_text()  # three loops: mean, centred squares (tl.where), output

# The one-loop form: a mean over dim 1 stored once after the loop, the block a kernel default, the grid a lambda.
CHANNEL_MEAN = '''import torch
import triton
import triton.language as tl

ENTRY = "channel_mean"


@triton.jit
def channel_mean_kernel(x_ptr, out_ptr, C, S, BLOCK: tl.constexpr = 32):
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c in tl.range(0, C):
        v = tl.load(x_ptr + (b * C + c) * S + offs, mask=offs < S, other=0.0)
        acc = acc + v.to(tl.float32)
    tl.store(out_ptr + b * S + offs, acc / C, mask=offs < S)


def channel_mean(x):
    B, C, S = x.shape
    out = torch.empty((B, S), dtype=x.dtype)
    channel_mean_kernel[lambda meta: (B, triton.cdiv(S, meta["BLOCK"]))](x, out, x.shape[1], S)
    return out


def get_inputs(device="cpu", channels=6):
    return [torch.randn(3, channels, 45, device=device)]


def reference(x):
    return x.mean(dim=1)
'''


def offered(text: str, kernel: str, target=H100) -> list[Candidate]:
    return [c for c in applicable(analyze(text), kernel, target) if c.action == "channel_tile"]


def apply(text: str, kernel: str, target=H100) -> str:
    (candidate,) = offered(text, kernel, target)
    return apply_candidate(text, candidate, target).new_text


def why(text: str, kernel: str) -> str | None:
    analysis = analyze(text)
    return ACTIONS["channel_tile"].why_not(analysis, analysis.kernel(kernel), H100)


def test_the_kernelbench_rms_norm_reads_its_channels_once():
    text = DEV_RMS.read_text()
    (candidate,) = offered(text, "rms_norm_channels_kernel")
    assert candidate.kind == "Tiling" and candidate.params == {}
    new = apply_candidate(text, candidate, H100).new_text
    kernel = new.split("class Model")[0]
    # Two loops of one vector load each -> one tile load the output pass reuses; no loop left.
    assert kernel.count("tl.load(") == 1 and "for c in" not in kernel
    assert "acc += tl.sum(x * x, axis=0)" in kernel  # other=0.0 makes the padded channels add zeros: no tl.where
    assert "x / rms[None, :], mask=mask_c[:, None] & mask[None, :])" in kernel
    assert "BLOCK_C = triton.next_power_of_2(C)\n" in new
    assert "BLOCK_S = min(256, max(1, 8192 // BLOCK_C))" in new
    assert "[(B, triton.cdiv(S, BLOCK_S))](x, y, C, S, self.eps, BLOCK_S=BLOCK_S, BLOCK_C=BLOCK_C)" in new
    assert not offered(new, "rms_norm_channels_kernel")  # no channel loop left


def test_a_centred_sum_is_masked_and_a_per_channel_load_is_a_column():
    new = apply(CHANNEL_NORM, "channel_norm_kernel")
    assert "sq += tl.sum(tl.where(mask_ch[:, None], d * d, 0.0), axis=0)" in new  # (0 - mean)^2 is not 0
    assert "w = tl.load(w_ptr + offs_ch[:, None], mask=mask_ch[:, None])" in new
    assert "d = x - mean[None, :]" in new
    # One read for three passes: the mean's inline load is named by the later passes' `x = tl.load(...)`.
    assert new.split("def channel_norm(")[0].count("tl.load(x_ptr") == 1 and "total += tl.sum(x, axis=0)" in new


def test_the_one_loop_form_with_a_default_block_and_a_lambda_grid():
    new = apply(CHANNEL_MEAN, "channel_mean_kernel")
    assert "acc = acc + tl.sum(v.to(tl.float32), axis=0)" in new
    assert "tl.load(x_ptr + (b * C + offs_c[:, None]) * S + offs[None, :], mask=mask_c[:, None] & (offs[None, :] < S)" in new
    assert "BLOCK_C = triton.next_power_of_2(x.shape[1])" in new
    assert "BLOCK = min(32, max(1, 8192 // BLOCK_C))" in new
    assert "(x, out, x.shape[1], S, BLOCK=BLOCK, BLOCK_C=BLOCK_C)" in new
    # BLOCK has a default, so BLOCK_C goes before it.
    assert "def channel_mean_kernel(x_ptr, out_ptr, C, S, BLOCK_C: tl.constexpr, BLOCK: tl.constexpr = 32):" in new


# The mean in half precision: the loop added each fp16 vector to the fp32 accumulator, so the tile is summed in fp32.
HALF_MEAN = CHANNEL_MEAN.replace("v.to(tl.float32)", "v").replace(
    "torch.randn(3, channels, 45, device=device)", "torch.randn(3, channels, 45, device=device, dtype=torch.float16)")


def test_half_precision_tiles_are_summed_in_the_accumulators_fp32():
    assert "acc = acc + tl.sum(v.to(tl.float32), axis=0)" in apply(HALF_MEAN, "channel_mean_kernel")
    assert "acc = acc + tl.sum(v.to(tl.float32), axis=0)" in apply(CHANNEL_MEAN, "channel_mean_kernel")  # cast once
    new = apply(CHANNEL_NORM.replace("w: torch.Tensor)", "w: torch.Tensor, dtype=torch.float16)"), "channel_norm_kernel")
    assert "sq += tl.sum(tl.where(mask_ch[:, None], (d * d).to(tl.float32), 0.0), axis=0)" in new
    assert "acc += tl.sum(x * x, axis=0)" in apply(DEV_RMS.read_text(), "rms_norm_channels_kernel")  # fp32 only: as is


REFUSALS = [
    ("acc += x * x", "acc = tl.maximum(acc, x)", "carried from one iteration to the next"),
    ("acc += x * x", "acc *= x", "not a sum"),
    ("acc += x * x", "if c > 0:\n            acc += x * x", "control flow"),
    ("x = tl.load(x_ptr + base + c * S + offs_s, mask=mask, other=0.0)\n        acc",
     "x = tl.load(x_ptr + base + offs_s, mask=mask, other=0.0)\n        acc", "load address does not depend on c"),
    ("x = tl.load(x_ptr + base + c * S + offs_s, mask=mask, other=0.0)\n        acc",
     "x = tl.load(x_ptr + base + c * c * S + offs_s, mask=mask, other=0.0)\n        acc", "not affine in c"),
    ("tl.store(y_ptr + base + c * S + offs_s", "tl.store(y_ptr + base + offs_s", "store address does not depend on c"),
    ("tl.store(y_ptr + base + c * S + offs_s", "tl.store(y_ptr + base + 0 * c + offs_s", "store address is not affine in c"),
    ("acc += x * x", "acc += tl.sum(x * x, axis=0)", "not an elementwise tl function"),
    ("rms = tl.sqrt(acc / C + eps)", "rms = tl.sqrt(acc / C + eps) + x", "read after the loop"),
    ("self.eps, BLOCK_S=256)", "self.eps, BLOCK_S=max(256, S))", "not a literal, a default or a host constant"),
    ("(x, y, C, S,", "(x, y, self.count(x), S,", "next_power_of_2 of"),
    ("[(B, triton.cdiv(S, 256))]", "[(B, triton.cdiv(S, 128))]", "does not divide by BLOCK_S"),
]


@pytest.mark.parametrize("old,new,reason", REFUSALS, ids=[r[2] for r in REFUSALS])
def test_refused_with_a_reason(old, new, reason):
    text = DEV_RMS.read_text()
    assert old in text
    changed = text.replace(old, new, 1)
    assert not offered(changed, "rms_norm_channels_kernel")
    assert reason in (why(changed, "rms_norm_channels_kernel") or ""), why(changed, "rms_norm_channels_kernel")


GRID_FIRST = DEV_RMS.read_text().replace(
    "        rms_norm_channels_kernel[(B, triton.cdiv(S, 256))](",
    "        grid = (B, triton.cdiv(S, 256))\n        rms_norm_channels_kernel[grid](")


def named_block(text: str) -> str:
    """The text after name_block: `BLOCK_S = 256` in the host, read by the grid and the launch."""
    (step,) = [c for c in applicable(analyze(text), "rms_norm_channels_kernel", H100) if c.action == "name_block"]
    return apply_candidate(text, step, H100).new_text


def test_a_grid_bound_before_the_launch_and_a_named_block_follow_the_cap():
    new = apply(GRID_FIRST, "rms_norm_channels_kernel")
    assert ("        BLOCK_C = triton.next_power_of_2(C)\n        BLOCK_S = min(256, max(1, 8192 // BLOCK_C))\n"
            "        grid = (B, triton.cdiv(S, BLOCK_S))\n"
            "        rms_norm_channels_kernel[grid](x, y, C, S, self.eps, BLOCK_S=BLOCK_S, BLOCK_C=BLOCK_C)") in new
    new = apply(named_block(DEV_RMS.read_text()), "rms_norm_channels_kernel")
    assert ("        BLOCK_S = 256\n        BLOCK_C = triton.next_power_of_2(C)\n"
            "        BLOCK_S = min(BLOCK_S, max(1, 8192 // BLOCK_C))\n"
            "        rms_norm_channels_kernel[(B, triton.cdiv(S, BLOCK_S))](") in new


def test_a_named_block_the_host_reads_after_the_launch_is_refused():
    text = named_block(DEV_RMS.read_text()).replace("        return y\n", "        print(BLOCK_S)\n        return y\n", 1)
    assert "reads BLOCK_S after the launch" in why(text, "rms_norm_channels_kernel")
    shared = GRID_FIRST.replace("        return y\n", "        rms_norm_channels_kernel[grid](x, y, C, S, self.eps, BLOCK_S=256)\n"
                                "        return y\n", 1)
    assert "exactly one launch" in why(shared, "rms_norm_channels_kernel")


def test_a_store_after_a_load_in_one_iteration_keeps_its_order_or_is_refused():
    text = DEV_RMS.read_text().replace(
        "        tl.store(y_ptr + base + c * S + offs_s, x / rms, mask=mask)",
        "        tl.store(y_ptr + base + c * S + offs_s, x / rms, mask=mask)\n"
        "        z = tl.load(y_ptr + base + c * S + offs_s, mask=mask, other=0.0)")
    assert "a load follows a store" in why(text, "rms_norm_channels_kernel")


def test_stale_text_and_parameters_are_refused():
    text = DEV_RMS.read_text()
    (candidate,) = offered(text, "rms_norm_channels_kernel")
    with pytest.raises(ActionError):
        apply_candidate(text.replace("acc += x * x", "acc *= x"), candidate, H100)
    with pytest.raises(ActionError):
        apply_candidate(text, Candidate("channel_tile", "Tiling", candidate.kernel, {"BLOCK_C": 32}, "x", 0), H100)


def test_the_heuristic_ranks_it_first_on_the_rms_norm():
    analysis = analyze(DEV_RMS.read_text())
    kernel = analysis.kernel("rms_norm_channels_kernel")
    ranked = HeuristicPolicy().rank(PolicyState(analysis, kernel, H200, []), applicable(analysis, kernel, H200))
    assert ranked[0].candidate.action == "channel_tile", [(r.candidate.action, r.score) for r in ranked[:4]]


@pytest.mark.slow
def test_same_results_under_the_interpreter(tmp_path):
    """Odd channel counts (padded tiles), positions not a multiple of the block, and 1100 channels, where the
    host caps the block at 8192 // 2048 = 4 positions."""
    big = CHANNEL_MEAN.replace("def get_inputs(device=\"cpu\", channels=6)", "def get_inputs(device=\"cpu\", channels=1100)")
    assert big != CHANNEL_MEAN
    jobs = [job(tmp_path, "channel_norm", CHANNEL_NORM, apply(CHANNEL_NORM, "channel_norm_kernel"), TOL_FP32),
            job(tmp_path, "channel_mean", CHANNEL_MEAN, apply(CHANNEL_MEAN, "channel_mean_kernel"), TOL_FP32),
            job(tmp_path, "channel_mean_1100", big, apply(big, "channel_mean_kernel"), TOL_FP32),
            job(tmp_path, "half_mean", HALF_MEAN, apply(HALF_MEAN, "channel_mean_kernel"), (2e-2, 2e-2))]

    # A planted mistake the comparison must catch: the centred squares summed without the channel mask.
    planted = apply(CHANNEL_NORM, "channel_norm_kernel").replace("tl.where(mask_ch[:, None], d * d, 0.0)", "d * d")
    jobs.append(job(tmp_path, "planted", CHANNEL_NORM, planted, TOL_FP32))
    results = {r["name"]: r for r in run_jobs(jobs, tmp_path)}
    assert not results.pop("planted")["ok"]
    assert all(r["ok"] for r in results.values()), results


@pytest.mark.slow
def test_kernelbench_spellings_keep_their_outputs_under_the_interpreter(tmp_path):
    """The dev RMS norm as written, with its grid bound first, and after name_block: each rewrite against the file
    (the wild corpus runner, ModelNew at the file's sizes halved to 32)."""
    import json
    import os
    import subprocess

    from mtmc_lsp.optimizer.verify.harness import discover_harness

    jobs = []
    for name, text in (("as_written", DEV_RMS.read_text()), ("grid_first", GRID_FIRST),
                       ("named_block", named_block(DEV_RMS.read_text()))):
        before, after = tmp_path / f"{name}_before.py", tmp_path / f"{name}_after.py"
        before.write_text(text)
        after.write_text(apply(text, "rms_norm_channels_kernel"))
        if name == "named_block":  # a planted mistake the runner must catch
            planted = tmp_path / "planted_after.py"
            planted.write_text(after.read_text().replace("x / rms[None, :]", "x * rms[None, :]"))
            jobs.append({"name": "planted", "harness": discover_harness(text, str(before)).to_json(), "atol": 1e-4,
                         "rtol": 1e-4, "seeds": [0], "cap": 32, "before": str(before), "after": str(planted)})
        jobs.append({"name": name, "harness": discover_harness(text, str(before)).to_json(), "atol": 1e-4, "rtol": 1e-4,
                     "seeds": [0], "cap": 32, "before": str(before), "after": str(after)})
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wild" / "_runner.py"), str(tmp_path / "jobs.json"),
                           str(tmp_path / "out.json")], env={**os.environ, "TRITON_INTERPRET": "1"},
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["name"]: r for r in json.loads((tmp_path / "out.json").read_text())}
    assert not results.pop("planted")["ok"]
    assert len(results) == 3 and all(r["ok"] for r in results.values()), results


@pytest.mark.slow
def test_the_edits_compile_for_hopper():
    from mtmc_lsp.optimizer.compile.compiler import CompileJob, compile_jobs

    for text, kernel, blocks in ((DEV_RMS.read_text(), "rms_norm_channels_kernel", {"BLOCK_S": 256, "BLOCK_C": 32}),
                                 (CHANNEL_NORM, "channel_norm_kernel", {"BLOCK_S": 64, "BLOCK_C": 128}),
                                 (CHANNEL_MEAN, "channel_mean_kernel", {"BLOCK": 4, "BLOCK_C": 2048})):
        new = apply(text, kernel, H200)
        (compiled,) = compile_jobs(new, [CompileJob(kernel, blocks, num_warps=4, num_stages=3)], H200, cache_dir=None)
        assert compiled.status == "ok", (kernel, compiled.status, compiled.error)


def test_the_edit_writes_the_kernels_own_spelling_of_triton_language():
    """The analysis binds `tl` in every file; a file that imports triton.language as `tlang` must get `tlang.`."""
    import re

    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "norm_rmsnorm_kernelbench.py").read_text()
    spelled = re.sub(r"(?<![\w.])tl\.", "tlang.", text.replace("import triton.language as tl", "import triton.language as tlang"))
    target = get_profile("h100")
    (cand,) = [c for c in applicable(analyze(spelled), "rms_norm_channels_kernel", target) if c.action == "channel_tile"]
    new = apply_candidate(spelled, cand, target).new_text
    assert not re.search(r"(?<![\w.])tl\.", new) and "tlang.arange" in new
