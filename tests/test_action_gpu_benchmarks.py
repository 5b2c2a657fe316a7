"""The GPU benchmark scripts of flash_attention and rows_per_program: committed sources match the engine, tables read right."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_per_program_table_lists_variants_only():
    rpp = script("rows_per_program_gpu")
    meta = {"gpu": "H200", "torch": "t", "triton": "3.6", "when": "now"}
    rows = [{"file": "norm.py", "sizes": {"batch": 8, "hidden": 128}, "before_ms": 0.02, "variants": {
        "tile4096": {"prior": 0.6, "ok": True, "max_abs_diff": 0.0, "ms": 0.01, "speedup": 2.0},
        "tile8192": {"prior": 0.54, "ok": False, "error": "RuntimeError: PassManager::run failed"}}}]
    lines = rpp.markdown(meta, rows)
    body = [line for line in lines if line.startswith("| norm.py")]
    assert body == ["| norm.py | {'batch': 8, 'hidden': 128} | 0.0200 | tile4096 | 0.60 | 0.0100 | 2.00x | ok |",
                    "| norm.py | {'batch': 8, 'hidden': 128} | 0.0200 | tile8192 | 0.54 | - | - | ERROR RuntimeError: PassManager::run failed |"]


def test_rows_per_program_manifest_has_a_prior_for_every_variant():
    rpp = script("rows_per_program_gpu")
    manifest = json.loads((rpp.GENERATED / "manifest.json").read_text())
    for case in manifest:
        tiled = {tag for tag in case["variants"] if "tile" in tag}
        assert tiled and tiled == set(case["prior"]), case["file"]
        assert all((ROOT / path).exists() for path in case["variants"].values())


def test_flash_attention_sources_are_the_engines_current_step():
    flash = script("flash_attention_gpu")
    manifest = json.loads((flash.GENERATED / "manifest.json").read_text())
    assert [entry["problem"] for entry in manifest] == list(flash.PROBLEMS)
    target = get_profile("h200")
    for entry in manifest:
        text = (ROOT / entry["before"]).read_text()
        analysis = analyze(text)
        cand = next(cd for k in analysis.kernels for cd in applicable(analysis, k, target) if cd.action == "flash_attention")
        assert (ROOT / entry["after"]["flash"]).read_text() == apply_candidate(text, cand, target).new_text, \
            f"{entry['problem']}: run python3 benchmarks/flash_attention_gpu.py --generate"
        assert "flash, chain's tiles" in entry["after"] and all((ROOT / p).exists() for p in entry["after"].values())


def test_tensor_descriptor_and_channel_tile_sources_are_the_engines_current_edits():
    """The committed variants the GPU machine times are what the engine writes today (else: run --generate)."""
    import _variants

    for name in ("tensor_descriptor_gpu", "channel_tile_gpu"):
        bench = script(name)
        entries = _variants.read_manifest(bench.GENERATED)
        assert entries and all((ROOT / e["path"]).exists() for e in entries), name
        for entry in entries:
            if entry["variant"] in ("descriptors", "channel_tile"):
                source, kernel = bench.PROBLEMS[entry["problem"]]
                steps = (bench.BASE + bench.VARIANTS[entry["variant"]] if name == "tensor_descriptor_gpu"
                         else [("channel_tile", None)])
                expected = _variants.apply_steps((ROOT / source).read_text(), kernel, steps, bench.TARGET)
                assert (ROOT / entry["path"]).read_text() == expected, f"run python benchmarks/{name}.py --generate"
