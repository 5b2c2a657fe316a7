"""Speedup and noise figures from interleaved timing rounds (pure Python: the server uses it too)."""

from __future__ import annotations

import statistics

# A reference (PyTorch eager) that cannot be timed as a CUDA graph is timed synchronized beside a synchronized
# timing of "new" under this name (runtime/timing.py); the speedup over the reference comes from those two.
SYNCHRONIZED_NEW = "new@synchronized"
# sizing["method"] of a run whose versions were CUDA graphs and whose reference alone was synchronized.
REFERENCE_SYNCHRONIZED = "cuda_graph, reference synchronized"


def speedup_stats(rounds: list[dict], baseline: str, candidate: str) -> dict | None:
    """Speedup of ``candidate`` over ``baseline`` with its noise band, from per-round medians.

    Each round timed both, so each round gives one ratio; the speedup is the median ratio and the
    band is the largest deviation of any round's ratio from it (what repeating the run could show).
    """
    pairs = [
        (row[baseline]["median_ms"], row[candidate]["median_ms"])
        for row in rounds
        if baseline in row and candidate in row and row[candidate]["median_ms"] > 0
    ]
    if not pairs:
        return None
    ratios = [b / c for b, c in pairs]
    speedup = statistics.median(ratios)
    band = max(abs(r - speedup) for r in ratios)
    base_ms = [b for b, _ in pairs]
    cand_ms = [c for _, c in pairs]
    return {
        "baseline": baseline,
        "candidate": candidate,
        "speedup": speedup,
        "band": band,
        "band_rel": band / speedup if speedup else 0.0,
        "ratios": ratios,
        "baseline_ms": statistics.median(base_ms),
        "candidate_ms": statistics.median(cand_ms),
        "baseline_spread_rel": _spread(base_ms),
        "candidate_spread_rel": _spread(cand_ms),
        "rounds": len(pairs),
    }


def _spread(values: list[float]) -> float:
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else 0.0
