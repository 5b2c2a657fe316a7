"""Evaluation on held-out kernels: each policy's greedy K-step chain against the search's best chain.

Every policy runs the MTMC loop greedily (beam 1, one verification per state: its first choice
decides) for ``steps`` steps per kernel; "search-best" is a wide exploring beam search, the upper
reference a policy can reach with the same actions. With ``max_verifications`` the greedy loop falls
back down the policy's ranking (as the editor's loop does) until that many verifications are spent, and
the table reads each verification budget (1, 2, 4, 8) off the one run: a greedy run under budget B is
the first B verifications of the run under a larger one, so ``trace`` (verifications spent and
log-speedup reached at each kept step) gives every budget, and the verifications a policy needs to
reach 90% of the search-best. Verifications are shared through one
source-keyed cache, so policies that reach the same text are measured once. The measure is the
chain's total log-speedup (the sum over its kept steps, speed measured on a GPU), with the kept and
correct steps counted; without a GPU no speed is measured and only the step counts mean anything.
"""

from __future__ import annotations

import dataclasses
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
BUDGETS = (1, 2, 4, 8)  # verifications per kernel the learning issue compares policies at


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
    verifications: int = 0  # attempts that reached the verifier
    trace: list[list[float]] = field(default_factory=list)  # [verifications spent, log-speedup reached] per kept step

    def log_speedup_within(self, budget: int) -> float:
        """The log-speedup the chain had reached after ``budget`` verifications."""
        return max([reached for spent, reached in self.trace if spent <= budget], default=0.0)

    def verifications_to_reach(self, goal: float) -> int | None:
        """The verifications spent when the chain first reached ``goal`` log-speedup; None if it never did."""
        return next((int(spent) for spent, reached in self.trace if reached >= goal - 1e-12), None)


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

    def budget_table(self, budgets: Iterable[int] = BUDGETS) -> list[dict[str, Any]]:
        """Per policy and verification budget: geomean speed-up and share of the search-best reached; and the
        verifications needed to reach 90% of the search-best (mean over the kernels where some speed-up exists)."""
        best = {(c.file, c.kernel): c.log_speedup for c in self.chains if c.policy == SEARCH_BEST}
        rows = []
        for name in dict.fromkeys(c.policy for c in self.chains if c.policy != SEARCH_BEST):
            mine = [c for c in self.chains if c.policy == name]
            scored = [c for c in mine if best.get((c.file, c.kernel), 0) > 0]
            needed = [c.verifications_to_reach(0.9 * best[(c.file, c.kernel)]) for c in scored]
            reached = [n for n in needed if n is not None]
            row: dict[str, Any] = {"policy": name, "kernels": len(mine), "kernels_with_speedup": len(scored),
                                   "reached_90pct": len(reached),
                                   "mean_verifications_to_90pct": sum(reached) / len(reached) if reached else None}
            for budget in budgets:
                logs = [c.log_speedup_within(budget) for c in mine]
                shares = [c.log_speedup_within(budget) / best[(c.file, c.kernel)] for c in scored]
                row[f"geomean_at_{budget}"] = math.exp(sum(logs) / max(len(logs), 1))
                row[f"share_at_{budget}"] = sum(shares) / len(shares) if shares else None
            rows.append(row)
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table(), "budgets": self.budget_table(), "chains": [c.__dict__ for c in self.chains]}


def evaluate(files: Iterable[str | Path], policies: dict[str, Policy], target: str = "h200", steps: int = 4,
             verifier: VerifierFactory | None = None, search_beam: int = 3, search_tries: int = 6,
             kernel_budget_s: float = 600.0, cache: ResultCache | None = None, search_best: bool = True,
             on_chain: Callable[[ChainResult], None] | None = None,
             max_verifications: int | None = None) -> EvalReport:
    """Greedy ``steps``-step chains of each policy, and the search-best chain, on every kernel of ``files``.

    ``max_verifications`` None: one verification per state (the policy's first choice decides). A number:
    the greedy loop falls back down the ranking (``tries`` = that number) until that many are spent.
    """
    from ..search import SearchConfig, optimize

    profile = get_profile(target)
    verifier_for = verifier or default_verifier
    cache = cache or ResultCache()
    tries = max_verifications or 1
    runs: dict[str, tuple[Policy, SearchConfig]] = {
        name: (policy, SearchConfig(steps=steps, beam=1, tries=tries, budget_s=kernel_budget_s))
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
                counted = _Counted(verify)
                if max_verifications and name != SEARCH_BEST:
                    config = dataclasses.replace(config, cancel=lambda c=counted: c.calls >= max_verifications)
                result = optimize(text, str(file), kernel.name, profile, policy, counted, config)
                chain = ChainResult(
                    name, str(file), kernel.name, len(result.steps), len(result.attempts),
                    sum(math.log(s.speedup) for s in result.steps if s.speedup and s.speedup > 0),
                    result.speed_measured, [candidate_text(s.candidate) for s in result.steps],
                    sum(1 for a in result.attempts if UNMEASURED in f"{a.summary} {a.reason}"),
                    counted.calls, _trace(result.attempts))
                chains.append(chain)
                if on_chain is not None:
                    on_chain(chain)
    return EvalReport(chains)


class _Counted:
    """A verifier that counts its calls once each has answered (so a cap never cancels the one in flight)."""

    def __init__(self, inner: Callable):
        self.inner, self.calls = inner, 0

    def __call__(self, new_text: str, old_text: str, cancel=None):
        try:
            return self.inner(new_text, old_text, cancel)
        finally:
            self.calls += 1


def _trace(attempts: list) -> list[list[float]]:
    """[verifications spent, log-speedup reached] at each kept step of a greedy chain."""
    spent, reached, trace = 0, 0.0, []
    for attempt in attempts:
        if "verify_s" in attempt.timings:
            spent += 1
        if attempt.kept:
            reached += math.log(attempt.speedup) if attempt.speedup and attempt.speedup > 0 else 0.0
            trace.append([spent, reached])
    return trace
