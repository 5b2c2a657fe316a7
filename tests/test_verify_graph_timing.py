"""CUDA-graph timing: the proof a graph must give before it is timed, and the fallback to one method per run.

The capture itself needs a GPU (benchmarks/graph_timing_gpu.py plants its cheats there); here the
pieces around it run on the CPU: what gets poisoned, what counts as reproducing the direct call, and
how ``interleaved`` falls back when an implementation refuses in the first or a later round.
"""

from __future__ import annotations

import torch
from mtmc_lsp.optimizer.verify.runtime import graphs, timing
from mtmc_lsp.optimizer.verify.runtime.stats import SYNCHRONIZED_NEW
from mtmc_lsp.optimizer.verify.runtime.graphs import (
    GraphRefused,
    poison_outputs,
    reproduces,
    tensor_leaves,
)
from mtmc_lsp.optimizer.verify.runtime.versions import clone_inputs


def test_outputs_are_poisoned_but_inputs_returned_as_outputs_are_not():
    x = torch.ones(4)
    fresh = torch.zeros(3)
    integers = torch.zeros(2, dtype=torch.int32)
    assert poison_outputs((x, {"y": fresh, "n": integers}), [x, 5]) == 2
    assert torch.equal(x, torch.ones(4))
    assert torch.isnan(fresh).all() and bool((integers == torch.iinfo(torch.int32).max).all())


def test_a_replay_that_left_poison_or_the_old_result_is_caught():
    direct = (torch.tensor([1.0, 2.0]), [torch.tensor([3.0])])
    assert reproduces((torch.tensor([1.0, 2.0]), [torch.tensor([3.0])]), direct) is None
    assert "did not reproduce" in reproduces((torch.tensor([1.0, float("nan")]), [torch.tensor([3.0])]), direct)
    assert "did not reproduce" in reproduces((torch.tensor([1.0, 2.0]), [torch.tensor([4.0])]), direct)
    # Only tensors are compared: a string or a module among the arguments is not a result.
    assert tensor_leaves(["gelu", {"b": torch.ones(1), "a": 2}, (torch.zeros(1),)])[0].item() == 1.0


class FakeGraph:
    """What GraphCall.prove returns, without a GPU: replay calls the implementation."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def replay(self):
        self.fn(self.args)


def run_interleaved(monkeypatch, refuse_in_round: dict[str, int], rounds: int = 3):
    """interleaved with graphs on and a fake prove that refuses ``name`` from round ``refuse_in_round[name]``."""
    calls = {"proved": 0, "bench": []}
    round_of_input: dict[int, int] = {}

    def prove(fn, args, check_inputs, clone):
        r = round_of_input[id(check_inputs)]
        calls["proved"] += 1
        for name, first_refused in refuse_in_round.items():
            if fn is impls[name] and r >= first_refused:
                raise GraphRefused("capture failed: a host sync")
        return FakeGraph(fn, args)

    def bench(fn, warmup_ms, rep_ms, sync_all_streams):
        calls["bench"].append("graph" if not sync_all_streams else "sync")
        fn()
        return {"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0}

    def make_inputs(r):
        inputs = [torch.full((4,), float(r))]
        round_of_input[id(inputs)] = r - timing.CHECK_SEED_OFFSET if r >= timing.CHECK_SEED_OFFSET else r
        return inputs

    impls = {"old": lambda a: a[0] * 2, "new": lambda a: a[0] + a[0], "reference": lambda a: a[0] * 2.0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(graphs.GraphCall, "prove", staticmethod(prove))
    monkeypatch.setattr(timing, "bench_ms", bench)
    sizing: dict = {}
    results = timing.interleaved(impls, make_inputs, rounds, 5, 20, True, clone_inputs, lambda m: None,
                                 sizing=sizing, graphs=True)
    return results, sizing, calls


def test_every_round_is_timed_as_a_graph_when_every_implementation_proves_itself(monkeypatch):
    results, sizing, calls = run_interleaved(monkeypatch, {})
    assert len(results) == 3 and sizing["method"] == "cuda_graph" and "graph_refused" not in sizing
    assert calls["bench"] == ["graph"] * 9 and calls["proved"] == 9


def test_a_refusal_in_the_first_round_times_every_round_synchronized(monkeypatch):
    results, sizing, calls = run_interleaved(monkeypatch, {"new": 0})
    assert len(results) == 3 and sizing["method"] == "synchronized"
    assert sizing["graph_refused"] == "new: capture failed: a host sync"
    assert calls["bench"] == ["sync"] * 9


def test_a_refusal_in_a_later_round_drops_the_graph_rounds_and_starts_again(monkeypatch):
    results, sizing, calls = run_interleaved(monkeypatch, {"old": 1})
    assert len(results) == 3 and sizing["method"] == "synchronized" and sizing["rounds"] == 3
    # Round one was timed as graphs, round two refused: all three rounds again, synchronized.
    assert calls["bench"] == ["graph"] * 3 + ["sync"] * 9


def test_a_reference_that_refuses_is_timed_synchronized_beside_a_synchronized_new(monkeypatch):
    results, sizing, calls = run_interleaved(monkeypatch, {"reference": 0})
    assert sizing["method"] == timing.REFERENCE_SYNCHRONIZED and sizing["graph_refused"].startswith("reference:")
    assert all(set(row) == {"old", "new", "reference", SYNCHRONIZED_NEW} for row in results)
    # Per round: old and new as graphs, the reference and the second "new" synchronized.
    assert calls["bench"].count("graph") == 6 and calls["bench"].count("sync") == 6


def test_a_reference_refusing_after_round_one_restarts_with_only_the_reference_synchronized(monkeypatch):
    results, sizing, calls = run_interleaved(monkeypatch, {"reference": 2})
    assert sizing["method"] == timing.REFERENCE_SYNCHRONIZED and len(results) == 3
    assert calls["bench"][:6] == ["graph"] * 6 and calls["bench"][6:].count("sync") == 6


def test_the_speedup_over_a_synchronized_reference_is_taken_against_the_synchronized_new():
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.verify import VerifyOptions
    from mtmc_lsp.optimizer.verify.api import _speed

    row = {"old": {"median_ms": 2.0}, "new": {"median_ms": 1.0}, "reference": {"median_ms": 3.0},
           SYNCHRONIZED_NEW: {"median_ms": 1.5}}
    speed, _ = _speed({"speed": {"rounds": [row] * 3, "sizing": {"method": timing.REFERENCE_SYNCHRONIZED}}}, {},
                      True, get_profile("h200"), "gpu", True, VerifyOptions())
    assert speed.speedup == 2.0 and speed.speedup_vs_reference == 2.0 and speed.reference_ms == 3.0


def test_without_a_gpu_graphs_are_not_tried(monkeypatch):
    monkeypatch.setattr(timing, "bench_ms", lambda fn, w, r, s: {"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0})
    sizing: dict = {}
    timing.interleaved({"old": lambda a: a, "new": lambda a: a}, lambda r: [torch.ones(2)], 2, 5, 20, True,
                       clone_inputs, lambda m: None, sizing=sizing, graphs=True)
    assert sizing["method"] == "synchronized" and "graph_refused" not in sizing
