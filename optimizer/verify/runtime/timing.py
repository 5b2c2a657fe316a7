"""GPU timing: ``triton.testing.do_bench`` medians (L2 flushed per run), old and new interleaved.

Each round times every implementation the same way: as a replayed CUDA graph of the call when every
implementation captures and proves itself (``graphs.py``), else as the call followed by a device-wide
synchronize (when only the reference refuses, the reference alone, with a synchronized "new" to be
compared with). ``sizing["method"]`` says which, ``sizing["graph_refused"]`` why graphs were not used.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .stats import REFERENCE_SYNCHRONIZED, SYNCHRONIZED_NEW


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


# Adaptive sizing: every do_bench call gets about this many runs of the slowest implementation,
# within [MIN_REP_MS, rep_ms]; a round whose ratios spread more than NOISY_BAND is followed by more
# rounds, up to twice the asked number.
TARGET_RUNS = 100
MIN_REP_MS = 20
MIN_WARMUP_MS = 5
NOISY_BAND = 0.05


def estimate_ms(fn: Callable[[], Any], sync_all_streams: bool) -> float:
    """A quick time per call (after one warm call): the median of three synchronized runs."""
    import time

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(3):
        started = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - started) * 1e3)
    return sorted(times)[1]


def interleaved(
    impls: dict[str, Callable[[Any], Any]],
    make_inputs: Callable[[int], Any],
    rounds: int,
    warmup_ms: int,
    rep_ms: int,
    sync_all_streams: bool,
    clone: Callable[[Any], Any],
    progress: Callable[[str], None],
    adaptive: bool = False,
    sizing: dict | None = None,
    graphs: bool = False,
) -> list[dict[str, dict]]:
    """``rounds`` rounds; each times every implementation on fresh inputs, the order rotating per round.

    Interleaving puts clock and thermal drift into every implementation alike, and the spread of
    the per-round ratios is the noise band of the speedup. ``adaptive`` sizes do_bench's warmup and
    repetition time by the measured time per call (a 20 us kernel does not need 100 ms of runs per
    measurement) and adds rounds while the ratios are noisy; ``sizing`` receives what was chosen.
    ``graphs`` times CUDA-graph replays where every implementation allows it; when one refuses in a
    later round, the rounds so far are dropped and all are timed again synchronized, so that every
    round, and every implementation in it, is measured one way. A refusing reference alone is timed
    synchronized beside a synchronized "new" (``SYNCHRONIZED_NEW``), the versions stay graphs.
    """
    method = "cuda_graph" if graphs and torch.cuda.is_available() else "synchronized"
    record: dict = {} if sizing is None else sizing
    while True:
        results, restart = _rounds(impls, make_inputs, rounds, warmup_ms, rep_ms, sync_all_streams, clone, progress,
                                   adaptive, record, method)
        if results is not None:
            return results
        method = restart  # a refusal after round one: every round again, one way


# A reference (PyTorch eager) that cannot be captured, because it copies a host tensor to the GPU inside the
# call, does not take the graphs away from the versions being compared: it is timed synchronized, beside a
# synchronized timing of "new" (stats.SYNCHRONIZED_NEW), and its ratio is taken from those two
# (stats.REFERENCE_SYNCHRONIZED).


def _graph_calls(impls: dict, names: list[str], inputs: Any, check_inputs: Any,
                 clone: Callable[[Any], Any]) -> tuple[dict, dict[str, str]]:
    """The implementations in ``names`` captured and proven on this round's inputs, and why the others were refused."""
    from .graphs import GraphCall, GraphRefused

    calls, refused = {}, {}
    for name in names:
        try:
            calls[name] = GraphCall.prove(impls[name], clone(inputs), check_inputs, clone)
        except GraphRefused as exc:
            refused[name] = f"{name}: {exc}"
    return calls, refused


# The second input set a graph must reproduce: far from every seed a round's inputs use.
CHECK_SEED_OFFSET = 500_000


def _next_method(method: str, refused: dict[str, str], names: list[str]) -> str:
    """How this round must be timed given the refusals: graphs, graphs but the reference, or none."""
    if not refused or method == "synchronized":
        return method
    if set(refused) == {"reference"} and "new" in names:
        return REFERENCE_SYNCHRONIZED
    return "synchronized"


def _rounds(impls, make_inputs, rounds, warmup_ms, rep_ms, sync_all_streams, clone, progress, adaptive,
            sizing: dict, method: str) -> tuple[list[dict[str, dict]] | None, str]:
    """The rounds, timed by ``method``; (None, method) when a refusal after round one needs them all again."""
    from .stats import speedup_stats

    names = list(impls)
    if adaptive:
        inputs = make_inputs(0)
        slowest = max(estimate_ms(lambda f=impls[n], a=clone(inputs): f(a), sync_all_streams) for n in names)
        rep_ms = int(min(rep_ms, max(MIN_REP_MS, TARGET_RUNS * slowest)))
        warmup_ms = int(min(warmup_ms, max(MIN_WARMUP_MS, TARGET_RUNS * slowest / 4)))
        del inputs
    sizing.update(warmup_ms=warmup_ms, rep_ms=rep_ms, asked_rounds=rounds, method=method)
    if adaptive:
        sizing["estimate_ms"] = round(slowest, 4)
    results = []
    limit = 2 * rounds if adaptive else rounds
    r = 0
    while r < limit:
        if r >= rounds and adaptive:
            pair = ("old", "new") if "old" in names else ("reference", "new")
            stats = speedup_stats(results, *pair) if all(p in names for p in pair) else None
            if stats is None or stats["band_rel"] <= NOISY_BAND:
                break
        inputs = make_inputs(r)
        graph_calls: dict = {}
        if method != "synchronized":
            graphed = [n for n in names if not (n == "reference" and method == REFERENCE_SYNCHRONIZED)]
            graph_calls, refused = _graph_calls(impls, graphed, inputs, make_inputs(CHECK_SEED_OFFSET + r), clone)
            now = _next_method(method, refused, names)
            if now != method:
                why = next(iter(refused.values()))
                sizing.update(method=now, graph_refused=why)
                progress(f"timing {'the reference ' if now == REFERENCE_SYNCHRONIZED else ''}without CUDA graphs: {why}")
                if results:
                    return None, now
                method = now
                if method == "synchronized":
                    graph_calls = {}
        order = names[r % len(names):] + names[: r % len(names)]
        if method == REFERENCE_SYNCHRONIZED:  # right after the reference: the pair it is compared in sees one drift
            order.insert(order.index("reference") + 1, SYNCHRONIZED_NEW)
        row = {}
        for name in order:
            if name in graph_calls:  # a synchronized reference was never captured: it is not among them
                row[name] = bench_ms(graph_calls[name].replay, warmup_ms, rep_ms, sync_all_streams=False)
            else:
                args = clone(inputs)
                fn = impls["new" if name == SYNCHRONIZED_NEW else name]
                row[name] = bench_ms(lambda: fn(args), warmup_ms, rep_ms, sync_all_streams)
            progress(f"timing round {r + 1}/{rounds}: {name} {row[name]['median_ms']:.4f} ms")
        results.append(row)
        del inputs, graph_calls
        r += 1
    sizing["rounds"] = len(results)
    return results, method
