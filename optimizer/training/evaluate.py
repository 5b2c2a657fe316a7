"""Evaluation on held-out kernels: each policy's greedy K-step chain against the search's best chain.

Every policy runs the MTMC loop greedily (beam 1, one verification per state: its first choice
decides) for ``steps`` steps per kernel; "search-best" is a wide exploring beam search, the upper
reference a policy can reach with the same actions. Verifications are shared through one
source-keyed cache, so policies that reach the same text are measured once. The measure is the
chain's total log-speedup (the sum over its kept steps, speed measured on a GPU), with the kept and
correct steps counted; without a GPU no speed is measured and only the step counts mean anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..analysis import analyze
from ..hardware import get_profile
from ..policy.base import Policy, candidate_text
from ..policy.heuristic import HeuristicPolicy
from .collect import CachedVerifier, ExplorationPolicy, ResultCache, VerifierFactory, default_verifier

SEARCH_BEST = "search-best"


def unmeasured_verifier(path: str, target) -> Callable:
    """A verifier for offline evaluation: every step not in the measured cache is reported unmeasured.

    A GPU window measures the held-out kernels' steps (``mtmc train eval --cache``, heuristic and
    random chains plus the exploring search); policies that need llama.cpp, absent on the GPU
    machine, are then scored here against that cache. A step no run measured counts as not kept
    (status "error", never cached), and the report counts such misses.
    """
    from ..verify.report import Reward, VerificationReport

    def verify(new_text: str, old_text: str, cancel=None) -> VerificationReport:
        return VerificationReport(
            status="error", mode=None, device="-", target=target.key,
            summary=f"not measured: {UNMEASURED}", compiled=False, correct=None, seeds=0,
            compared_against=[], checks=[], reward=Reward.of(False, False, None), error=UNMEASURED, path=path)

    return verify


UNMEASURED = "this step was not in the measured cache (offline evaluation)"


@dataclass
class ChainResult:
    """One policy's chain on one kernel."""

    policy: str
    file: str
    kernel: str
    kept: int
    attempts: int
    log_speedup: float  # sum of the kept steps' log-speedups (0 when speed is not measured)
    speed_measured: bool
    actions: list[str] = field(default_factory=list)
    unmeasured: int = 0  # attempts answered by ``unmeasured_verifier`` (offline evaluation)


@dataclass
class EvalReport:
    """Every chain, and per policy the means and the share of the search-best's log-speedup reached."""

    chains: list[ChainResult]

    def table(self) -> list[dict[str, Any]]:
        best = {(c.file, c.kernel): c.log_speedup for c in self.chains if c.policy == SEARCH_BEST}
        rows = []
        for name in dict.fromkeys(c.policy for c in self.chains):
            mine = [c for c in self.chains if c.policy == name]
            reached = [c.log_speedup / best[(c.file, c.kernel)] for c in mine
                       if best.get((c.file, c.kernel), 0) > 0]
            rows.append({
                "policy": name, "kernels": len(mine),
                "mean_log_speedup": sum(c.log_speedup for c in mine) / max(len(mine), 1),
                "geomean_speedup": math.exp(sum(c.log_speedup for c in mine) / max(len(mine), 1)),
                "mean_kept_steps": sum(c.kept for c in mine) / max(len(mine), 1),
                "share_of_search_best": sum(reached) / len(reached) if reached else None,
                "unmeasured_attempts": sum(c.unmeasured for c in mine),
            })
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table(), "chains": [c.__dict__ for c in self.chains]}


def evaluate(files: Iterable[str | Path], policies: dict[str, Policy], target: str = "h200", steps: int = 4,
             verifier: VerifierFactory | None = None, search_beam: int = 3, search_tries: int = 6,
             kernel_budget_s: float = 600.0, cache: ResultCache | None = None, search_best: bool = True,
             on_chain: Callable[[ChainResult], None] | None = None) -> EvalReport:
    """Greedy ``steps``-step chains of each policy, and the search-best chain, on every kernel of ``files``."""
    from ..search import SearchConfig, optimize

    profile = get_profile(target)
    verifier_for = verifier or default_verifier
    cache = cache or ResultCache()
    runs: dict[str, tuple[Policy, SearchConfig]] = {
        name: (policy, SearchConfig(steps=steps, beam=1, tries=1, budget_s=kernel_budget_s))
        for name, policy in policies.items()
    }
    if search_best:
        runs[SEARCH_BEST] = (ExplorationPolicy(HeuristicPolicy(), seed=0),
                             SearchConfig(steps=steps, beam=search_beam, tries=search_tries, budget_s=kernel_budget_s))
    chains = []
    for file in files:
        text = Path(file).read_text(encoding="utf-8")
        verify = CachedVerifier(verifier_for(str(file), profile), cache, profile.key, "eval")
        for kernel in analyze(text, str(file)).kernels:
            for name, (policy, config) in runs.items():
                result = optimize(text, str(file), kernel.name, profile, policy, verify, config)
                chain = ChainResult(
                    name, str(file), kernel.name, len(result.steps), len(result.attempts),
                    sum(math.log(s.speedup) for s in result.steps if s.speedup and s.speedup > 0),
                    result.speed_measured, [candidate_text(s.candidate) for s in result.steps],
                    sum(1 for a in result.attempts if UNMEASURED in f"{a.summary} {a.reason}"))
                chains.append(chain)
                if on_chain is not None:
                    on_chain(chain)
    return EvalReport(chains)
