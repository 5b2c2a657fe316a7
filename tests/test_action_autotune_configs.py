"""Autotune configs built by code: tiling reads them and appends one config with ``+``; the in-place editors refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.actions.pipelining import ACTION as PIPELINING
from mtmc_lsp.optimizer.actions.tiling import ACTION as TILING
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_action_split_k import why_refused as split_k_refusal  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H100 = get_profile("h100")

SCALE = '''import torch
import triton
import triton.language as tl

SIZES = [64, 128]


def get_configs():
    """Two blocks, two warp counts."""
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in SIZES for w in [2, 4]]


CONFIGS = get_configs()
TUPLE_CONFIGS = tuple(triton.Config({"BLOCK": b}, num_warps=4) for b in SIZES)


@triton.autotune(configs=CONFIGS_EXPR, key=["n"])
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, x * alpha + 1.0, mask=mask)


def scale(x):
    y = torch.zeros_like(x)
    n = x.numel()
    scale_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, y, n, 0.5)
    return y
'''

# The configs argument in each style public code writes it, and how tiling's new config joins it.
STYLES = {
    "comprehension": ('[triton.Config({"BLOCK": b}, num_warps=w) for b in [64, 128] for w in [2, 4]]',
                      '[triton.Config({"BLOCK": b}, num_warps=w) for b in [64, 128] for w in [2, 4]] + '
                      '[triton.Config({"BLOCK": 1024}, num_warps=4)]'),
    "module_name": ("CONFIGS", 'CONFIGS + [triton.Config({"BLOCK": 1024}, num_warps=4)]'),
    "helper": ("get_configs()", 'get_configs() + [triton.Config({"BLOCK": 1024}, num_warps=4)]'),
    "concatenation": ('get_configs() + [triton.Config({"BLOCK": 32}, num_warps=1)]',
                      'get_configs() + [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 1024}, num_warps=4)]'),
    "filter": ("[c for c in CONFIGS if c.num_warps == 4]",
               '[c for c in CONFIGS if c.num_warps == 4] + [triton.Config({"BLOCK": 1024}, num_warps=4)]'),
    "tuple": ("TUPLE_CONFIGS", 'TUPLE_CONFIGS + (triton.Config({"BLOCK": 1024}, num_warps=4),)'),
}


def scale_text(style: str) -> str:
    return SCALE.replace("CONFIGS_EXPR", STYLES[style][0])


def tiled(text: str, kernel: str, params: dict) -> str:
    cand = next(c for c in applicable(analyze(text), kernel, H100) if c.action == "tiling" and c.params == params)
    return apply_candidate(text, cand, H100).new_text


@pytest.mark.parametrize("style", sorted(STYLES))
def test_tiling_reads_known_configs_and_appends_one_config_to_the_expression(style):
    text = scale_text(style)
    tune = analyze(text).kernel("scale_kernel").autotune
    assert tune.configs_known and not tune.configs_are_literal
    offered = [c.params for c in applicable(analyze(text), "scale_kernel", H100) if c.action == "tiling"]
    present = {cfg.kwargs["BLOCK"] for cfg in tune.configs}
    assert offered and all(p["BLOCK"] not in present for p in offered)  # only tiles the configs do not hold
    new = tiled(text, "scale_kernel", {"BLOCK": 1024})
    assert f"@triton.autotune(configs={STYLES[style][1]}, key=" in new
    # Only the decorator changed: the module-level configs other kernels may share stay as they were.
    assert new.replace(STYLES[style][1], STYLES[style][0], 1) == text
    after = analyze(new).kernel("scale_kernel").autotune
    assert after.configs_known and len(after.configs) == len(tune.configs) + 1


def test_a_conditional_configs_expression_is_parenthesized_before_the_new_config():
    text = SCALE.replace("CONFIGS_EXPR", "CONFIGS if SIZES[0] == 64 else get_configs()[:1]")
    new = tiled(text, "scale_kernel", {"BLOCK": 1024})
    assert '(CONFIGS if SIZES[0] == 64 else get_configs()[:1]) + [triton.Config({"BLOCK": 1024}, num_warps=4)]' in new


def test_configs_that_cannot_be_read_are_refused_with_the_evaluators_reason():
    text = SCALE.replace("CONFIGS_EXPR", "[c for c in CONFIGS if keep(c)]")
    analysis = analyze(text)
    assert not [c for c in applicable(analysis, "scale_kernel", H100) if c.action == "tiling"]
    why = TILING.why_not(analysis, analysis.kernel("scale_kernel"), H100)
    assert why.startswith("the autotune configs cannot be read statically: ") and "keep(c)" in why


def test_a_shared_pre_hook_and_a_parameter_all_configs_agree_on_go_with_the_new_config():
    text = SCALE.replace("def get_configs():", "def hook(nargs):\n    pass\n\n\ndef get_configs():").replace(
        "CONFIGS_EXPR", '[triton.Config({"BLOCK": b, "UNROLL": 2}, num_warps=4, pre_hook=hook) for b in SIZES]').replace(
        "BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, UNROLL: tl.constexpr):")
    new = tiled(text, "scale_kernel", {"BLOCK": 1024})
    assert '+ [triton.Config({"BLOCK": 1024, "UNROLL": 2}, num_warps=4, pre_hook=hook)]' in new
    # A parameter the configs cross with every tile is independent of it: the new tile takes the first config's.
    crossed = text.replace('"UNROLL": 2}', '"UNROLL": u}').replace("for b in SIZES]", "for b in SIZES for u in [4, 2]]")
    assert '+ [triton.Config({"BLOCK": 1024, "UNROLL": 4}, num_warps=4, pre_hook=hook)]' in \
        tiled(crossed, "scale_kernel", {"BLOCK": 1024})
    differing = text.replace('"UNROLL": 2}', '"UNROLL": b // 32}')
    analysis = analyze(differing)
    assert not [c for c in applicable(analysis, "scale_kernel", H100) if c.action == "tiling"]
    assert "also choose UNROLL (2, 4)" in TILING.why_not(analysis, analysis.kernel("scale_kernel"), H100)


MATMUL = (ROOT / "tests" / "corpus" / "kernels" / "matmul_autotuned.py").read_text()
LITERAL_CONFIGS = '''[
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4, num_stages=2),
    ]'''
MATMUL_COMPREHENSION = MATMUL.replace(
    LITERAL_CONFIGS, '[triton.Config({"BLOCK_M": b, "BLOCK_N": b, "BLOCK_K": 16}, num_warps=4, num_stages=2) '
                     "for b in [16, 32]]")


def test_the_matmul_corpus_kernel_reads_the_same_written_either_way():
    assert MATMUL_COMPREHENSION != MATMUL
    literal, built = (analyze(t).kernel("mm_autotuned_kernel").autotune for t in (MATMUL, MATMUL_COMPREHENSION))
    assert [(c.kwargs, c.num_warps, c.num_stages) for c in literal.configs] == \
        [(c.kwargs, c.num_warps, c.num_stages) for c in built.configs]
    # Tiling offers the same new tiles for both; pipelining's check reads both alike.
    offers = [sorted(str(c.params) for c in applicable(analyze(t), "mm_autotuned_kernel", H100) if c.action == "tiling")
              for t in (MATMUL, MATMUL_COMPREHENSION)]
    assert offers[0] and offers[0] == offers[1]


def test_pipelining_and_split_k_refuse_configs_built_by_code_saying_why():
    analysis = analyze(MATMUL_COMPREHENSION)
    kernel = analysis.kernel("mm_autotuned_kernel")
    assert [c for c in applicable(analyze(MATMUL), "mm_autotuned_kernel", H100) if c.action == "pipelining"]
    assert not [c for c in applicable(analysis, "mm_autotuned_kernel", H100) if c.action == "pipelining"]
    why = PIPELINING.why_not(analysis, kernel, H100)
    assert "fits every one of the 2 autotune configs" in why and "literal list only" in why
    assert "an edit made in a literal list of triton.Config only" in split_k_refusal(MATMUL_COMPREHENSION,
                                                                                      "mm_autotuned_kernel")


RUNNER = r'''
import importlib.util, json, sys, torch
jobs, results = json.load(open(sys.argv[1])), []
def load(path, tag):
    spec = importlib.util.spec_from_file_location(tag, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
for i, job in enumerate(jobs):
    before, after = load(job["before"], "b%d" % i), load(job["after"], "a%d" % i)
    tuners = [getattr(m, job["kernel"]) for m in (before, after)]
    grew = len(tuners[1].configs) - len(tuners[0].configs)
    # Each side runs one config: the original's first and the appended one (the autotuner would time them all).
    tuners[0].configs, tuners[1].configs = tuners[0].configs[:1], tuners[1].configs[-1:]
    chosen = dict(tuners[1].configs[0].kwargs)
    worst = 0.0
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = eval(job["inputs"], {"torch": torch})
        want = getattr(before, job["entry"])(*[x.clone() for x in inputs])
        got = getattr(after, job["entry"])(*[x.clone() for x in inputs])
        worst = max(worst, float((want.double() - got.double()).abs().nan_to_num(float("inf")).max()))
    results.append({"name": job["name"], "worst": worst, "grew": grew, "chosen": chosen})
json.dump(results, open(sys.argv[2], "w"))
'''


@pytest.mark.slow
def test_tiled_kernels_match_the_originals_under_the_interpreter(tmp_path):
    jobs = [{"name": style, "kernel": "scale_kernel", "entry": "scale", "inputs": "[torch.randn(300)]",
             "before": scale_text(style), "after": tiled(scale_text(style), "scale_kernel", {"BLOCK": 1024})}
            for style in ("comprehension", "helper", "tuple")]
    mm_tile = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}
    offered = [c.params for c in applicable(analyze(MATMUL_COMPREHENSION), "mm_autotuned_kernel", H100)
               if c.action == "tiling"]
    mm_tile = mm_tile if mm_tile in offered else min(offered, key=lambda p: p["BLOCK_M"] * p["BLOCK_N"] * p["BLOCK_K"])
    jobs.append({"name": "matmul", "kernel": "mm_autotuned_kernel", "entry": "matmul_autotuned",
                 "inputs": "[torch.randn(40, 48).half(), torch.randn(48, 56).half()]",
                 "before": MATMUL_COMPREHENSION, "after": tiled(MATMUL_COMPREHENSION, "mm_autotuned_kernel", mm_tile)})
    # A planted mistake the comparison must catch: the stores stop at 256, which only the new config's block passes.
    planted = jobs[0]["after"].replace("mask=mask)", "mask=mask & (offsets < 256))")
    jobs.append({**jobs[0], "name": "planted", "after": planted})
    for i, job in enumerate(jobs):
        for side in ("before", "after"):
            path = tmp_path / f"{i}_{side}.py"
            path.write_text(job[side])
            job[side] = str(path)
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "runner.py").write_text(RUNNER)
    proc = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "jobs.json"), str(tmp_path / "out.json")],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["name"]: r for r in json.loads((tmp_path / "out.json").read_text())}
    assert results.pop("planted")["worst"] > 1e-3
    assert results["matmul"]["chosen"] == mm_tile
    for name, r in results.items():
        assert r["grew"] == 1, (name, r)
        assert r["worst"] <= 1e-2 if name == "matmul" else r["worst"] == 0.0, (name, r)
    assert {r["chosen"]["BLOCK"] for name, r in results.items() if name != "matmul"} == {1024}


def test_single_pass_drops_an_autotune_whose_built_configs_choose_only_the_row_block():
    from test_action_single_pass import AUTOTUNED_VAR

    literal = '[triton.Config({"BLOCK_N": 16}, num_warps=2), triton.Config({"BLOCK_N": 64}, num_warps=4)]'
    built = AUTOTUNED_VAR.replace(literal, '[triton.Config({"BLOCK_N": b}, num_warps=w) for b, w in [(16, 2), (64, 4)]]')
    assert built != AUTOTUNED_VAR
    cand = next(c for c in applicable(analyze(built), "var_kernel", H100) if c.action == "single_pass")
    new = apply_candidate(built, cand, H100).new_text
    assert "autotune" not in new and "triton.Config" not in new
    more = built.replace('{"BLOCK_N": b}', '{"BLOCK_N": b, "EVEN": 1}')
    hooked = built.replace("num_warps=w)", "num_warps=w, pre_hook=row_var)")  # a hook runs at every launch
    for text in (more, hooked):
        assert text != built
        assert not [c for c in applicable(analyze(text), "var_kernel", H100) if c.action == "single_pass"]


@pytest.mark.slow
def test_single_pass_on_built_configs_stays_equivalent(tmp_path):
    from test_action_single_pass import AUTOTUNED_VAR
    from test_actions_semantics import TOL_FP32, job, run_jobs

    literal = '[triton.Config({"BLOCK_N": 16}, num_warps=2), triton.Config({"BLOCK_N": 64}, num_warps=4)]'
    built = AUTOTUNED_VAR.replace(literal, '[triton.Config({"BLOCK_N": b}, num_warps=w) for b, w in [(16, 2), (64, 4)]]')
    cand = next(c for c in applicable(analyze(built), "var_kernel", H100) if c.action == "single_pass")
    new = apply_candidate(built, cand, H100).new_text
    results = run_jobs([job(tmp_path, "built:reference", built, built, TOL_FP32, reference=True),
                        job(tmp_path, "built:single_pass", built, new, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results


def test_warps_only_where_the_launch_computes_its_block_from_the_row():
    """Liger's rms_norm: ``BLOCK_SIZE, num_warps = calculate_settings(n_cols)``. The block stays the launch's; the
    configs choose the warps per row length."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "norm_rmsnorm_liger.py"
    text = path.read_text()
    (candidate,) = [c for c in applicable(analyze(text), "_rms_norm_forward_kernel", H100) if c.action == "autotune"]
    new = apply_candidate(text, candidate, H100).new_text
    assert "        triton.Config({}, num_warps=2),\n" in new and "triton.Config({}, num_warps=32)" in new
    assert '    key=["n_cols"],\n' in new and "calculate_settings(n_cols)" in new
    (launch,) = [s for s in analyze(new).launches if s.kernel == "_rms_norm_forward_kernel"]
    assert launch.num_warps is None and launch.arg("BLOCK_SIZE") is not None  # warps to the configs, block kept
