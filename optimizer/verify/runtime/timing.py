"""GPU timing: ``triton.testing.do_bench`` medians (L2 flushed per run), old and new interleaved."""

from __future__ import annotations

from typing import Any, Callable

import torch


def bench_ms(fn: Callable[[], Any], warmup_ms: int, rep_ms: int, sync_all_streams: bool) -> dict:
    """Median, p20 and p80 in ms of ``fn`` under do_bench, which zeroes a large buffer before each run."""
    from triton.testing import do_bench

    if sync_all_streams:
        # Work pushed onto another stream or thread must count: wait for the whole device.
        def timed():
            fn()
            torch.cuda.synchronize()
    else:
        timed = fn
    median, p20, p80 = do_bench(timed, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return {"median_ms": float(median), "p20_ms": float(p20), "p80_ms": float(p80)}


def interleaved(
    impls: dict[str, Callable[[Any], Any]],
    make_inputs: Callable[[int], Any],
    rounds: int,
    warmup_ms: int,
    rep_ms: int,
    sync_all_streams: bool,
    clone: Callable[[Any], Any],
    progress: Callable[[str], None],
) -> list[dict[str, dict]]:
    """``rounds`` rounds; each times every implementation on fresh inputs, the order rotating per round.

    Interleaving puts clock and thermal drift into every implementation alike, and the spread of
    the per-round ratios is the noise band of the speedup.
    """
    names = list(impls)
    results = []
    for r in range(rounds):
        inputs = make_inputs(r)
        order = names[r % len(names):] + names[: r % len(names)]
        row = {}
        for name in order:
            args = clone(inputs)
            fn = impls[name]
            row[name] = bench_ms(lambda: fn(args), warmup_ms, rep_ms, sync_all_streams)
            progress(f"timing round {r + 1}/{rounds}: {name} {row[name]['median_ms']:.4f} ms")
        results.append(row)
        del inputs
    return results
