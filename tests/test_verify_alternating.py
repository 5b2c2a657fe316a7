"""Alternating timing: implementations timed run by run in turn share the GPU's clock, whatever it does.

A fake device clock stands in for CUDA events: each call advances it by its duration times a slowdown
that grows with time, as an H200's clock sinks under a compute-bound kernel's power draw.
"""

from __future__ import annotations

import pytest
import torch
from mtmc_lsp.optimizer.verify.runtime import timing


class FakeDevice:
    def __init__(self, drift_per_ms: float):
        self.now = 0.0
        self.drift_per_ms = drift_per_ms
        self.log: list[str] = []

    def call(self, name: str, ms: float):
        def run():
            self.log.append(name)
            self.now += ms * (1.0 + self.drift_per_ms * self.now)

        return run

    def event_class(self):
        device = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                self.at = None

            def record(self):
                self.at = device.now

            def elapsed_time(self, end: "Event") -> float:
                return end.at - self.at

        return Event


@pytest.fixture
def device(monkeypatch):
    fake = FakeDevice(drift_per_ms=0.002)
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "_flush_buffer", lambda: torch.zeros(4, dtype=torch.int32))
    return fake


def test_runs_alternate_between_the_implementations(device):
    stats = timing.bench_alternating({"old": device.call("old", 2.0), "new": device.call("new", 1.0)}, 10, 40)
    timed = device.log[-2 * stats["old"]["runs"]:]
    assert timed[:6] == ["old", "new"] * 3
    assert stats["old"]["runs"] == stats["new"]["runs"] >= timing.MIN_RUNS


def test_a_sinking_clock_leaves_the_ratio_of_alternating_runs_intact(device):
    calls = {"old": device.call("old", 2.0), "new": device.call("new", 1.0)}
    stats = timing.bench_alternating(calls, 10, 200)
    assert stats["old"]["median_ms"] / stats["new"]["median_ms"] == pytest.approx(2.0, rel=0.01)
    # The same clock, one implementation after the other (what do_bench per implementation does): biased.
    sequential = {name: timing.bench_alternating({name: fn}, 10, 200)[name]["median_ms"] for name, fn in calls.items()}
    assert sequential["old"] / sequential["new"] < 1.8
