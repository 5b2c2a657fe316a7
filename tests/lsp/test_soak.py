"""A CI-sized soak (benchmarks/soak.py): 300 edits with verifications streaming, nothing lost, latency and RSS bounded."""

from __future__ import annotations

import importlib.util

from .raw_client import REPO


def _soak_module():
    spec = importlib.util.spec_from_file_location("mtmc_soak", REPO / "benchmarks" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_short_soak_loses_nothing_and_stays_bounded():
    soak = _soak_module()
    result = soak.run(edits=300, verify_every=100, probe_every=10, sample_every=100, garbage_every=50,
                      debounce_ms=20, seed=16, rate=0, burst=50, pause_ms=150)
    assert result["text_equal"] and result["version_equal"] and result["alive"]
    assert result["last_diagnostics_version"] == result["final_version"]
    assert result["diagnostics_published"] >= 6  # one per pause at least: diagnostics kept up
    assert result["verifications"]["answered"] == result["verifications"]["started"] == 3
    assert result["framing_problems_seen"] >= result["broken_frames_sent"] == 6
    # Generous bounds for a loaded 2-core CI machine; the committed 10,000-edit run has the real figures.
    assert result["latency_ms"]["hover"]["p95"] < 1000
    assert result["rss_curve"][-1]["rss_mb"] - result["rss_idle_mb"] < 150
    assert "p99" in soak.report(result)
