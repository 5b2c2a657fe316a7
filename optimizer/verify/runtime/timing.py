"""GPU timing: ``triton.testing.do_bench`` medians (L2 flushed per run), old and new interleaved.

Each round times every implementation the same way: as a replayed CUDA graph of the call when every
implementation captures and proves itself (``graphs.py``), else as the call followed by a device-wide
synchronize (when only the reference refuses, the reference alone, with a synchronized "new" to be
compared with). ``sizing["method"]`` says which, ``sizing["graph_refused"]`` why graphs were not used.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import gpu_lock
from .stats import REFERENCE_SYNCHRONIZED, SYNCHRONIZED_NEW


def bench_ms(fn: Callable[[], Any], warmup_ms: int, rep_ms: int, sync_all_streams: bool) -> dict:
    """Median, p20 and p80 in ms of ``fn`` under do_bench, which zeroes a large buffer before each run."""
    from triton.testing import do_bench

    timed = _synchronized(fn) if sync_all_streams else fn
    median, p20, p80 = do_bench(timed, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return {"median_ms": float(median), "p20_ms": float(p20), "p80_ms": float(p80)}


# do_bench's L2 flush: a 256 MB buffer zeroed before every timed run.
FLUSH_BYTES = 256 * 1024 * 1024
# Runs per implementation in one alternating round: at least enough for a median, at most what a 2 us kernel needs.
MIN_RUNS = 5
MAX_RUNS = 5000


def bench_alternating(calls: dict[str, Callable[[], Any]], warmup_ms: int, rep_ms: int) -> dict[str, dict]:
    """Every call timed run after run in turn (A B A B ...), each run after an L2 flush; stats as ``bench_ms``.

    Timing one implementation for ``rep_ms``, then the next, lets the GPU's clock move between them: a
    compute-bound H200 kernel drawing full power loses 10-15% of its clock within tens of ms, and the
    per-round ratio of two 1 ms matmuls then spread by +/-17% (session 10's suite run). Alternating run by
    run puts the same clock under both, so their ratio keeps only the difference between the kernels.
    The rounds get about as much GPU time as ``bench_ms`` gives each implementation.
    """
    names = list(calls)
    cache = _flush_buffer()
    for name in names:
        calls[name]()
    torch.cuda.synchronize()
    # One pass over every implementation, flushes included (do_bench's estimate counts its flush too).
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    _timed_runs(calls, names, 3, cache)
    last.record()
    torch.cuda.synchronize()
    per_pass = first.elapsed_time(last) / 3
    runs = int(min(MAX_RUNS, max(MIN_RUNS, rep_ms * len(names) / max(per_pass, 1e-6))))
    for _ in range(int(min(MAX_RUNS, max(1, warmup_ms * len(names) / max(per_pass, 1e-6))))):
        for name in names:
            calls[name]()
    times = _timed_runs(calls, names, runs, cache)
    del cache
    return {name: _quantiles(times[name]) for name in names}


def _flush_buffer() -> torch.Tensor:
    return torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def _timed_runs(calls: dict, names: list[str], runs: int, cache: torch.Tensor) -> dict[str, list[float]]:
    """``runs`` alternating passes over ``names``, each run between two events after an L2 flush; ms per run."""
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(runs)] for name in names}
    for i in range(runs):
        for name in names:
            cache.zero_()
            start, end = events[name][i]
            start.record()
            calls[name]()
            end.record()
    torch.cuda.synchronize()
    return {name: [start.elapsed_time(end) for start, end in pairs] for name, pairs in events.items()}


def _quantiles(times: list[float]) -> dict:
    ordered = sorted(times)

    def at(q: float) -> float:  # linear interpolation, as torch.quantile in do_bench
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return {"median_ms": float(at(0.5)), "p20_ms": float(at(0.2)), "p80_ms": float(at(0.8)), "runs": len(times)}


def bench_round(calls: dict[str, tuple[Callable[[], Any], bool]], warmup_ms: int, rep_ms: int) -> dict[str, dict]:
    """One round: ``{name: (fn, synchronize_after)}`` timed alternating on a GPU, else one after another."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        wrapped = {name: (fn if not sync else _synchronized(fn)) for name, (fn, sync) in calls.items()}
        return bench_alternating(wrapped, warmup_ms, rep_ms)
    return {name: bench_ms(fn, warmup_ms, rep_ms, sync) for name, (fn, sync) in calls.items()}


def _synchronized(fn: Callable[[], Any]) -> Callable[[], Any]:
    def timed():  # work pushed onto another stream or thread must count: wait for the whole device
        fn()
        torch.cuda.synchronize()

    return timed


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
    with gpu_lock.alone():  # other verifying processes on this GPU wait: their kernels would be timed too
        while True:
            results, restart = _rounds(impls, make_inputs, rounds, warmup_ms, rep_ms, sync_all_streams, clone,
                                       progress, adaptive, record, method)
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
        calls = {}
        for name in order:
            if name in graph_calls:  # a synchronized reference was never captured: it is not among them
                calls[name] = (graph_calls[name].replay, False)
            else:
                fn, args = impls["new" if name == SYNCHRONIZED_NEW else name], clone(inputs)
                calls[name] = ((lambda fn=fn, args=args: fn(args)), sync_all_streams)
        row = bench_round(calls, warmup_ms, rep_ms)
        progress(f"timing round {r + 1}/{rounds}: " + ", ".join(f"{n} {row[n]['median_ms']:.4f} ms" for n in order))
        results.append(row)
        del inputs, graph_calls
        r += 1
    sizing["rounds"] = len(results)
    return results, method
