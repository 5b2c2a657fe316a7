"""Semantics: every action, applied to the corpus, computes the same outputs under TRITON_INTERPRET=1."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

from corpus.kernels import kernel_files, kernel_path

CORPUS = Path(__file__).parent / "corpus" / "kernels"
RUNNER = CORPUS / "_equivalence.py"
TARGET = get_profile("h100")
# Tolerances by the widest float the file computes in; numerics-changing actions get fp16's.
TOL_FP32 = (1e-4, 1e-4)
TOL_FP16 = (2e-2, 2e-2)


def corpus_files() -> list[Path]:
    return kernel_files()


def tolerance(text: str, changes_numerics: bool) -> tuple[float, float]:
    return TOL_FP16 if changes_numerics or "float16" in text else TOL_FP32


@functools.lru_cache(maxsize=1)
def planned_edits() -> tuple[tuple[str, str, str, bool], ...]:
    """(job name, before text, after text, changes_numerics) for the first candidate of each action."""
    edits = []
    for path in corpus_files():
        text = path.read_text()
        analysis = analyze(text, str(path))
        for kernel in analysis.kernels:
            seen: set[str] = set()
            for candidate in applicable(analysis, kernel, TARGET, allow_precision=True):
                if candidate.action in seen:
                    continue
                seen.add(candidate.action)
                edit = apply_candidate(text, candidate, TARGET)
                edits.append((f"{path.stem}:{candidate.key()}", text, edit.new_text, candidate.changes_numerics))
    return tuple(edits)


def run_jobs(jobs: list[dict], tmp_path: Path) -> list[dict]:
    jobs_file, results_file = tmp_path / "jobs.json", tmp_path / "results.json"
    jobs_file.write_text(json.dumps(jobs))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(RUNNER), str(jobs_file), str(results_file)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(results_file.read_text())


def job(tmp_path: Path, name: str, before: str, after: str, tol: tuple[float, float], **extra) -> dict:
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)[:80]
    b, a = tmp_path / f"{safe}_before.py", tmp_path / f"{safe}_after.py"
    b.write_text(before)
    a.write_text(after)
    return {"name": name, "before": str(b), "after": str(a), "atol": tol[0], "rtol": tol[1], **extra}


def test_every_action_is_exercised_by_the_corpus():
    used = {name.split(":")[1].split("(")[0] for name, *_ in planned_edits()}
    assert used == set(ACTIONS), f"actions the corpus never triggers: {sorted(set(ACTIONS) - used)}"


def test_edits_are_small():
    for name, before, after, _ in planned_edits():
        from mtmc_lsp.optimizer.edits import changed_line_count

        action = ACTIONS[name.split(":")[1].split("(")[0]]
        assert 0 < changed_line_count(before, after) <= getattr(action, "max_changed_lines", 25), name  # flash_attention: up to 100


@pytest.mark.slow
@pytest.mark.timeout(900)  # one interpreter process runs every action's edit of every corpus kernel
def test_actions_preserve_outputs_under_the_interpreter(tmp_path):
    jobs = []
    for path in corpus_files():  # the corpus itself is right
        text = path.read_text()
        jobs.append(job(tmp_path, f"{path.stem}:reference", text, text, TOL_FP16, reference=True))
    for name, before, after, numerics in planned_edits():
        jobs.append(job(tmp_path, name, before, after, tolerance(before, numerics)))
    # A planted wrong transformation: shrink the elementwise block at the launch but not in the
    # grid, so half of every block's elements are never written. The comparison must catch it.
    text = kernel_path("elementwise").read_text()
    wrong = text.replace("BLOCK_SIZE=BLOCK_SIZE)", "BLOCK_SIZE=64)")
    assert wrong != text
    jobs.append(job(tmp_path, "planted:wrong-tiling", text, wrong, TOL_FP32, planted=True))
    # A second plant: single pass without the next_power_of_2 block (rows longer than one block).
    soft = kernel_path("softmax").read_text()
    analysis = analyze(soft)
    single = next(c for c in applicable(analysis, "softmax_kernel", TARGET) if c.action == "single_pass")
    broken = apply_candidate(soft, single, TARGET).new_text.replace("BLOCK_SIZE=triton.next_power_of_2(n_cols)", "BLOCK_SIZE=128")
    jobs.append(job(tmp_path, "planted:single-pass-short-block", soft, broken, TOL_FP32, planted=True))

    # A third: an autotuned kernel whose second config is wrong (K loads lose their mask, and only
    # BLOCK_K=16 divides K=48). Only comparing every config, not just the chosen one, catches it.
    tuned = kernel_path("matmul_autotuned").read_text()
    unmasked = tuned.replace("mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0", "mask=rm[:, None] < M, other=0.0")
    unmasked = unmasked.replace("mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0", "mask=rn[None, :] < N, other=0.0")
    unmasked = unmasked.replace('"BLOCK_K": 16}, num_warps=4, num_stages=2),\n    ]', '"BLOCK_K": 32}, num_warps=4, num_stages=2),\n    ]')
    assert unmasked.count("BLOCK_K\": 32") == 1
    jobs.append(job(tmp_path, "planted:second-autotune-config", tuned, unmasked, TOL_FP16, planted=True))

    # Fusion applied twice (each consumer brings another input as a new producer parameter), then tiling.
    chain = kernel_path("silu_mul_add").read_text()
    fused = chain
    for action in ("fusion", "fusion", "tiling"):
        step = next(c for c in applicable(analyze(fused), "silu_kernel", TARGET) if c.action == action)
        fused = apply_candidate(fused, step, TARGET).new_text
    assert "silu_kernel[grid](a, out, n_elements, b, r, BLOCK_SIZE=BLOCK_SIZE)" in fused
    jobs.append(job(tmp_path, "silu_mul_add:fusion-fusion-tiling", chain, fused, TOL_FP32))

    results = run_jobs(jobs, tmp_path)
    by_name = {r["name"]: r for r in results}
    planted = {j["name"] for j in jobs if j.get("planted")}
    failures = [f"{r['name']}: diff={r['max_abs_diff']} {r['error'] or ''}" for r in results if not r["ok"] and r["name"] not in planted]
    assert not failures, "\n".join(failures)
    for name in planted:
        assert not by_name[name]["ok"], f"the planted wrong transformation {name} was not caught"
