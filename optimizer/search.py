"""The MTMC loop: the policy proposes, one action is applied, the step is verified, kept if it helps, repeat.

``optimize`` runs a beam search: from each of the ``beam`` best states it goes down the policy's
ranking until ``beam`` steps are kept or ``tries`` verifications are spent (``beam=1`` is greedy
with fallback to the next-ranked action). A step is kept when it is correct and, where speed is measured (a GPU), when its reward
compile 0.1 + correct 0.3 + log(speedup) beats the 0.4 of standing still, i.e. it is faster than
the previous step beyond the measurement's noise band. Without a GPU speed is unavailable, so
correct steps are kept and ranked by the policy's score; the result says so. The result holds
every kept step as its own unified diff, the final text, and every attempt (kept or not).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from .actions.base import ActionError, Candidate, Edit
from .analysis import FileAnalysis, analyze
from .hardware import GpuProfile
from .policy.base import Policy, PolicyState, Ranked, StepOutcome, candidate_text

if TYPE_CHECKING:
    from .verify import VerificationReport

CancelLike = Callable[[], bool] | threading.Event | None
CandidateSource = Callable[[FileAnalysis, str, GpuProfile], list[Candidate]]
Applier = Callable[[str, Candidate, GpuProfile], Edit]


class Verifier(Protocol):
    """Checks ``new_text`` against ``old_text``; ``cancel()`` true means stop (``make_verifier``)."""

    def __call__(self, new_text: str, old_text: str, cancel: Callable[[], bool] | None = None) -> "VerificationReport":
        ...


@dataclass
class SearchConfig:
    """How the loop searches: depth, width, budget, and the hooks that replace its parts."""

    steps: int = 3  # kept steps per kernel at most
    beam: int = 1  # states kept per depth (1: greedy, falling back down the ranking)
    budget_s: float = 600.0
    tries: int | None = None  # verifications per state before giving up on it (None: 3 x beam; doubled while none is kept)
    allow_precision: bool = False  # also offer numerics-changing actions
    candidates: CandidateSource | None = None  # replaces the action registry's ``applicable``
    apply: Applier | None = None  # replaces ``apply_candidate`` (the LLM coder's goals)
    on_step: Callable[["Attempt"], None] | None = None
    on_rank: Callable[[int, list[Ranked]], None] | None = None
    cancel: CancelLike = None
    record: Any = None  # a TrajectoryRecorder

    @property
    def tries_per_state(self) -> int:
        return max(self.beam, int(self.tries)) if self.tries else 3 * self.beam

    def tries_at(self, kept_any: bool) -> int:
        """Verifications allowed at a state so far; by default doubled while none of its children was kept
        (the wild dev corpus, H200, session 8: loops stopped after three rejected tries with most of their
        budget left)."""
        return self.tries_per_state if self.tries or kept_any else 2 * self.tries_per_state

STANDING_STILL_REWARD = 0.4  # compile 0.1 + correct 0.3 + log(1)
# A step must change the time by more than this to count, whatever the rounds' band says: on the H200 a step
# that only names a constant (name_block) measured 1.004x at a +/-0.2% band and took one of three kept steps.
MIN_BELIEVED_CHANGE = 0.01
# Steps whose worth is what they let later steps do: a preparation (name_block) and a fusion (one kernel fewer,
# the fused kernel's passes then open to single_pass and the like). One that is correct and within the noise is
# kept as an *enabling* step while a step is left after it: with CUDA-graph timing a neutral fusion no longer
# looks faster by chance (the suite's cross entropy, H200: its row fusion measured 1.00x +/-0.1% and was dropped,
# and with it the single-pass rewrite the fused kernel allows). Any other neutral step is kept the same way when
# the kernel is offered an action after it that it was not offered before (``opened_actions``).
ENABLING_KINDS = frozenset({"Prepare", "Fusion"})
# A correct step that is slower on its own, but after which the kernel is offered a structural action it was not
# offered before, is a *detour*: kept one step further and judged with the steps after it, since the run's best
# state is the one whose product of speed-ups is largest. Broadcast products rewritten as ``tl.dot`` (use_dot)
# keep the caller's 16-wide tiles and lose to the multiply-and-sum at first; tiling them is what the dot allows.
# A step more than DETOUR_FLOOR slower is not repaid by one step after it often enough to spend the tries.
DETOUR_FLOOR = 0.5
DETOUR_OPENS_KINDS = frozenset({"Tiling", "Pipelining", "Reordering", "TensorCore"})
SPEED_UNAVAILABLE_NOTE = (
    "speed unavailable (no GPU: verified in the Triton interpreter): steps were kept because they are "
    "correct, and ranked by the policy's score; their speed-up is not measured"
)


@dataclass
class Attempt:
    """One candidate tried from one state: applied, verified, and kept or not (with why)."""

    depth: int  # 1 for a first step from the original text
    candidate: Candidate
    rank: int  # 0 = the policy's first choice in its state
    score: float
    logprob: float | None
    status: str  # "kept" | "rejected" | "not_applied" | "unchanged" | "revisit" (not verified)
    reason: str
    compiled: bool | None = None
    correct: bool | None = None
    speedup: float | None = None
    within_noise: bool | None = None
    reward: float | None = None
    summary: str = ""
    diff: str = ""
    changed_lines: int = 0
    new_text: str = ""
    parent_text: str = ""
    report: dict | None = None
    timings: dict[str, float] = field(default_factory=dict)
    policy_metadata: dict[str, Any] = field(default_factory=dict)
    enabling: bool = False  # kept within the noise for what later steps can do (ENABLING_KINDS, or opened actions)
    detour: bool = False  # kept though slower, for the structural actions it opens (DETOUR_FLOOR)
    opens: list[str] = field(default_factory=list)  # the actions an enabling step or a detour was kept for

    @property
    def kept(self) -> bool:
        return self.status == "kept"

    def keep_as_enabling(self, opens: list[str] | None = None) -> None:
        """Keep a correct, neutral step for the steps it opens (the caller checks one is left): a Prepare or Fusion
        step, or one after which the kernel is offered actions it was not offered before (``opens``)."""
        self.status, self.enabling, self.opens = "kept", True, list(opens or [])
        what = (f"it opens {', '.join(opens)}" if opens else f"a {self.candidate.kind.lower()} step opens others")
        self.reason = f"kept as an enabling step: {self.speedup:.2f}x is within the noise, and {what}"

    def keep_as_detour(self, opens: list[str]) -> None:
        """Keep a correct step that is slower on its own for the structural actions it opens; its slow-down
        counts in every state after it, so only steps that repay it make a result."""
        self.status, self.detour, self.opens = "kept", True, list(opens)
        self.reason = (f"kept as a detour: {self.speedup:.2f}x on its own, and it opens {', '.join(opens)}; "
                       "it stays only if the steps after it repay it")

    def outcome(self) -> StepOutcome:
        return StepOutcome(self.candidate, self.compiled, self.correct, self.speedup, self.reward, self.kept)

    def to_json(self, with_texts: bool = False) -> dict[str, Any]:
        data = {
            "depth": self.depth, "candidate": self.candidate.to_json(), "action": candidate_text(self.candidate),
            "rank": self.rank, "score": self.score, "logprob": self.logprob, "status": self.status,
            "reason": self.reason, "compiled": self.compiled, "correct": self.correct, "speedup": self.speedup,
            "withinNoise": self.within_noise, "reward": self.reward, "summary": self.summary, "diff": self.diff,
            "changedLines": self.changed_lines, "timings": dict(self.timings), "policy": dict(self.policy_metadata),
            "report": self.report, "enabling": self.enabling, "detour": self.detour, "opens": self.opens,
        }
        if with_texts:
            data["newText"] = self.new_text
        return data


@dataclass
class OptimizeResult:
    """The kept steps (each its own diff), the final text, every attempt, and how the search ended."""

    path: str | None
    kernel: str
    target: str
    policy: str
    original_text: str
    final_text: str
    steps: list[Attempt]
    attempts: list[Attempt]
    speed_measured: bool
    stopped: str  # "steps" | "budget" | "cancelled" | "no candidates" | "no improvement" | "kernel gone"
    notes: list[str]
    elapsed_s: float

    @property
    def diffs(self) -> list[str]:
        return [step.diff for step in self.steps]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "kernel": self.kernel, "target": self.target, "policy": self.policy,
            "steps": [s.to_json() for s in self.steps], "attempts": [a.to_json() for a in self.attempts],
            "speedMeasured": self.speed_measured, "stopped": self.stopped, "notes": list(self.notes),
            "elapsedS": round(self.elapsed_s, 3), "finalText": self.final_text, "changed": self.final_text != self.original_text,
        }


@dataclass
class _Node:
    """A state in the beam: a text and the kept steps that led to it."""

    text: str
    steps: list[Attempt]

    def value(self) -> tuple[float, int, int, float]:
        """Measured log-speedup first, then how many correct steps, then the policy's confidence.

        Enabling steps count for neither speed nor number (they were kept within the noise), and a state that
        ends in one ranks below the same state without it: a preparation nothing followed is not a result."""
        paying = [s for s in self.steps if not s.enabling]
        log_speed = sum(math.log(s.speedup) for s in paying if s.speedup and s.speedup > 0)
        dangling = 0
        for step in reversed(self.steps):
            if not step.enabling:
                break
            dangling += 1
        return (log_speed, len(paying), -dangling, sum(s.score for s in self.steps))


def unified_diff(old: str, new: str, path: str | None, before: str, after: str) -> str:
    name = Path(path).name if path else "kernel.py"
    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"a/{name} ({before})", tofile=f"b/{name} ({after})",
    ))


def make_verifier(path: str | None, target: GpuProfile, options: Any = None, progress: Callable | None = None) -> Verifier:
    """A ``verify(new_text, old_text, cancel)`` over ``optimizer.verify.verify_file``."""
    from .verify import VerifyOptions, verify_file

    opts = options or VerifyOptions()

    def verify(new_text: str, old_text: str, cancel: CancelLike = None):
        return verify_file(new_text, old_text, path, target, opts, progress=progress, cancel=cancel)

    return verify


@dataclass
class Verdict:
    """What the loop decides on, read from one ``VerificationReport``."""

    status: str
    compiled: bool | None
    correct: bool | None
    speedup: float | None  # None where speed was not measured or not believed
    within_noise: bool | None
    reward: float | None
    summary: str

    @classmethod
    def of(cls, report: "VerificationReport") -> "Verdict":
        speed = report.speed
        speedup = within_noise = None
        if speed is not None and speed.believed:
            speedup = speed.speedup
            within_noise = speedup is not None and abs(speedup - 1.0) <= max(speed.band or 0.0, MIN_BELIEVED_CHANGE)
        reward = report.reward.total if report.reward is not None else None
        return cls(report.status, report.compiled, report.correct, speedup, within_noise, reward, report.summary)

    def decide(self) -> tuple[str, str]:
        """Keep or reject the verified step, and why."""
        if self.status == "cancelled":
            # Stopped, not failed: the loop's budget ran out (or the user cancelled) while it ran (a hang is "timeout").
            return "rejected", "not verified: cancelled before it finished (the budget ran out)"
        if self.compiled is False:
            return "rejected", f"does not compile ({self.status})"
        if self.correct is not True:
            return "rejected", "wrong results" if self.correct is False else f"not verified ({self.status})"
        if self.speedup is None:
            return "kept", "correct; speed unavailable, kept on correctness"
        if self.within_noise:
            return "rejected", f"{self.speedup:.2f}x is within the measurement noise: no improvement"
        reward = self.reward if self.reward is not None else STANDING_STILL_REWARD
        if self.speedup > 1.0 and reward > STANDING_STILL_REWARD:
            return "kept", f"correct and {self.speedup:.2f}x faster (reward {reward:.3f})"
        return "rejected", f"correct but {self.speedup:.2f}x: slower than the previous step"


def _cancelled(cancel: CancelLike) -> bool:
    if cancel is None:
        return False
    if isinstance(cancel, threading.Event):
        return cancel.is_set()
    return bool(cancel())


def optimize(text: str, path: str | None = None, kernel: str | None = None, target: GpuProfile | None = None,
             policy: Policy | None = None, verify: Verifier | None = None, config: SearchConfig | None = None,
             **overrides: Any) -> OptimizeResult:
    """Run the MTMC loop on ``kernel`` (every kernel in turn when None) for ``config.steps`` kept steps each.

    ``target`` defaults to the local GPU (else H100), ``policy`` to the embedded model, and
    ``verify`` to ``verify_file`` for ``path`` and ``target``. ``overrides`` are SearchConfig fields
    (``steps=4``); an unknown name is a TypeError.
    """
    config = dataclasses.replace(config or SearchConfig(), **overrides)
    if target is None:
        from .hardware import resolve_target

        target = resolve_target("")
    if policy is None:
        from .policy import make_policy

        policy = make_policy(None)
    verify = verify or make_verifier(path, target)
    if kernel is not None:
        return _KernelSearch(text, path, kernel, target, policy, verify, config, {text}).run()
    started = time.monotonic()
    seen = {text}  # versions already reached in any kernel: a step back to one is a cycle
    warm: list[float] = []  # warm verification times, shared by the kernels' searches
    verified: dict[tuple[int, int], VerificationReport] = {}  # what each edit of each version measured
    names = [k.name for k in analyze(text, path).kernels]
    current, steps_all, attempts, notes, stopped, measured = text, [], [], [], "no candidates", False
    # The first round gives each kernel an even share of what is left, so the first cannot spend the later ones'
    # time. A second round gives what the first left over (kernels fused away, kernels with nothing to try) to the
    # kernels whose search ran out of its share, each continuing from the file as the first round left it (the
    # suite's cross entropy, H200, session 15: its first kernel fused the other two and stopped at its 20 s share
    # before the last fusion it had kept in an earlier run, while the 40 s of the other two went unused).
    todo, rounds = names, 0
    while todo and rounds < 2:
        rounds += 1
        ran_out = []
        for position, name in enumerate(todo):
            left = config.budget_s - (time.monotonic() - started)
            share = left / (len(todo) - position)
            if left <= 0 or _cancelled(config.cancel) or (rounds > 1 and not _worth_a_round(share, warm)):
                stopped = "cancelled" if _cancelled(config.cancel) else "budget"
                break
            if analyze(current, path).kernel(name) is None:
                if rounds == 1:
                    notes.append(f"kernel {name} was removed by an earlier step (fused)")
                continue
            part = _KernelSearch(current, path, name, target, policy, verify, dataclasses.replace(config, budget_s=share),
                                 seen, warm, verified).run()
            current = part.final_text
            steps_all += part.steps
            attempts += part.attempts
            measured = measured or part.speed_measured
            notes += [n for n in part.notes if n not in notes]
            stopped = part.stopped
            if part.stopped == "budget":
                ran_out.append(name)
        todo = ran_out
    _number_diffs(steps_all, path)  # each kept step follows the one before it in the file
    return OptimizeResult(
        path=path, kernel=",".join(names), target=target.key, policy=policy.describe(), original_text=text,
        final_text=current, steps=steps_all, attempts=attempts, speed_measured=measured, stopped=stopped,
        notes=notes, elapsed_s=time.monotonic() - started,
    )


def _worth_a_round(share: float, warm: list[float]) -> bool:
    """Whether a second round's share holds a few verifications (three of the warm ones so far, else 5 s)."""
    return share >= (3 * statistics.median(warm) if warm else 5.0)


def _number_diffs(steps: list[Attempt], path: str | None) -> None:
    for i, step in enumerate(steps, start=1):
        step.diff = unified_diff(step.parent_text, step.new_text, path, "original" if i == 1 else f"step {i - 1}",
                                 f"step {i}")


class _KernelSearch:
    """The loop for one kernel, in three parts per depth: expand (rank what applies to a state),
    try (apply and verify down the ranking), select (the best children become the next frontier)."""

    def __init__(self, text: str, path: str | None, kernel: str, target: GpuProfile, policy: Policy,
                 verify: Verifier, config: SearchConfig, seen: set[str], warm_verify_s: list[float] | None = None,
                 verified: dict[tuple[int, int], VerificationReport] | None = None) -> None:
        from . import actions

        self.text, self.path, self.kernel, self.target = text, path, kernel, target
        self.policy, self.verify, self.config = policy, verify, config
        self.list_candidates = config.candidates or (
            lambda a, k, t: actions.applicable(a, k, t, config.allow_precision))
        self.apply_one = config.apply or actions.apply_candidate
        self.started = time.monotonic()
        self.deadline = self.started + max(0.0, config.budget_s)
        self.seen = seen
        self.seen.add(text)
        self.warm_verify_s = [] if warm_verify_s is None else warm_verify_s  # shared by a file's kernels
        # (parent text, new text) -> its report, shared by a file's kernels: a fusion is offered from each kernel
        # of its chain, and the same edit of the same file measures the same (held-out three-kernel attention,
        # H200, session 17: the flash step verified at 0.28x from the scores kernel and again from the P @ V
        # kernel, and the budget ran out before the autotune step session 16 had kept at 1.93x).
        self.verified = {} if verified is None else verified
        self.attempts: list[Attempt] = []
        self.tried: set[tuple[int, str]] = set()
        self._offered: dict[str, tuple[FileAnalysis, list[Candidate]]] = {}  # offered_in's, per text
        self.speed_measured = False
        self.stopped = "steps"
        self.notes: list[str] = []

    def stop_now(self) -> bool:
        return _cancelled(self.config.cancel) or self.out_of_time()

    def out_of_time(self) -> bool:
        """The budget is spent, or too little of it is left for one more verification.

        A verification still running at the deadline is cancelled, which wastes its time and kills its worker:
        the next one (the next kernel's or file's first) then starts a process, counts the reference's FLOPs and
        compiles again, 10-14 s on the H200 (suite, session 10). So none is started that the warm ones so far
        (of every kernel of the file) say cannot finish; a search's first, which may start cold, is not one."""
        now = time.monotonic()
        warm = self.warm_verify_s
        return now >= self.deadline or (bool(warm) and now + statistics.median(warm) > self.deadline)

    def run(self) -> OptimizeResult:
        config = self.config
        if config.record is not None:
            config.record.begin(path=self.path, kernel=self.kernel, target=self.target, policy=self.policy.describe(),
                                text=self.text, steps=config.steps, beam=config.beam, budget_s=config.budget_s)
        root = _Node(self.text, [])
        frontier, best = [root], root
        beam = max(1, int(config.beam))
        for depth in range(1, max(0, config.steps) + 1):
            children: list[_Node] = []
            saw_candidates = False
            for node in frontier:
                if self.stop_now():
                    break
                expanded = self.expand(node, depth)
                if expanded is None:
                    continue
                saw_candidates = True
                children += self.try_ranked(node, depth, *expanded)
            best = max([best, *children], key=lambda n: n.value())
            if _cancelled(config.cancel):
                self.stopped = "cancelled"
                break
            if self.out_of_time():
                self.stopped = "budget"
                break
            if not children:
                if self.stopped != "kernel gone":
                    self.stopped = "no improvement" if saw_candidates else "no candidates"
                break
            frontier = self.select(children, beam)
        return self.result(best)

    def expand(self, node: _Node, depth: int) -> tuple[PolicyState, list[Ranked], float] | None:
        """The state of ``node`` and the policy's ranking of what applies to it (None: nothing does)."""
        analysis, listed = self.offered_in(node.text)
        found = analysis.kernel(self.kernel)
        if found is None:
            self.stopped = "kernel gone"
            self.notes.append(f"kernel {self.kernel} is no longer in the file after step {depth - 1}")
            return None
        state = PolicyState(analysis, found, self.target, [s.outcome() for s in node.steps])
        offered = [c for c in listed if (hash(node.text), c.key()) not in self.tried]
        if node.steps and node.steps[-1].detour:  # a slower state is worth only the steps it was kept for
            offered = [c for c in offered if c.action in node.steps[-1].opens]
        elif node.steps and node.steps[-1].enabling and node.steps[-1].candidate.kind != "Fusion":
            # A neutral step (a named constant, grouped order) leaves the kernel as fast as its parent: what the
            # parent already measured would measure the same here. Only what the step opens, or what the parent
            # did not try, is tried (held-out mm_sum_product, H200, session 15: reordering and contiguity were
            # verified four times each, from neutral states, and the 15 s ran out with nothing kept; session 13
            # had kept 2.20x there). A fusion changes the kernel the same keys name: nothing is skipped after it.
            step = node.steps[-1]
            parent = hash(step.parent_text)
            offered = [c for c in offered if c.action in step.opens or (parent, c.key()) not in self.tried]
        if depth >= self.config.steps:  # a preparation only pays through a later step: none is left
            offered = [c for c in offered if c.kind != "Prepare"]
        if not offered:
            return None
        t0 = time.monotonic()
        ranked = self.policy.rank(state, offered)
        rank_s = time.monotonic() - t0
        if self.config.on_rank is not None:
            self.config.on_rank(depth, ranked)
        return state, ranked, rank_s

    def try_ranked(self, node: _Node, depth: int, state: PolicyState, ranked: list[Ranked],
                   rank_s: float) -> list[_Node]:
        """Down the ranking until ``beam`` steps are kept or the verifications per state run out."""
        children: list[_Node] = []
        applied = 0
        queue = list(enumerate(ranked))  # (the policy's rank, choice); the rank is what trajectories record
        sweeping: Candidate | None = None  # a measured step whose variants are verified next (``sweeps_variants``)
        while queue:
            position, choice = queue.pop(0)
            # An enabling child does not fill the beam: a step that is faster on its own, if one comes, is preferred.
            faster = [c for c in children if not (c.steps[-1].enabling or c.steps[-1].detour)]
            paying = [c for c in children if not c.steps[-1].detour]
            variant = sweeping is not None and _variants(sweeping, choice.candidate)
            full = len(faster) >= self.config.beam and not variant
            if full or applied >= self.config.tries_at(bool(paying)) + int(variant) or self.stop_now():
                break
            self.tried.add((hash(node.text), choice.candidate.key()))
            attempt = _try(node, choice, position, depth, self.path, self.target, self.apply_one, self.verify,
                           self.config.cancel, self.deadline, self.seen, self.verified)
            attempt.timings["rank_s"] = round(rank_s, 4)
            if "verify_s" in attempt.timings:
                if any("verify_s" in a.timings for a in self.attempts) and "cancelled" not in attempt.reason:
                    self.warm_verify_s.append(attempt.timings["verify_s"])
            if attempt.status == "rejected" and attempt.within_noise and depth < self.config.steps:
                if attempt.candidate.kind in ENABLING_KINDS:
                    attempt.keep_as_enabling()
                elif opens := self.opened_actions(attempt, ranked):
                    attempt.keep_as_enabling(opens)
            elif self.may_detour(attempt, node, depth):
                if opens := self.opened_actions(attempt, ranked, DETOUR_OPENS_KINDS):
                    attempt.keep_as_detour(opens)
            self.attempts.append(attempt)
            _emit(attempt, self.config.on_step, self.config.record, state)
            if attempt.status in ("not_applied", "unchanged", "revisit"):
                continue  # not verified: costs no try
            applied += 0 if attempt.timings.get("reused_verification") else 1  # a known verdict costs no try
            self.speed_measured = self.speed_measured or attempt.speedup is not None
            if attempt.kept:
                self.seen.add(attempt.new_text)
                children.append(_Node(attempt.new_text, node.steps + [attempt]))
            if _sweeps(choice.candidate) and (attempt.kept or attempt.correct):
                # Its variants next, kept or slower: the tile decides whether it pays (``select`` keeps the fastest).
                sweeping = choice.candidate
                queue = [q for q in queue if _variants(sweeping, q[1].candidate)] + \
                    [q for q in queue if not _variants(sweeping, q[1].candidate)]
            elif not attempt.kept:
                queue = _after_other_actions(queue, choice.candidate.action)
        return children

    def may_detour(self, attempt: Attempt, node: _Node, depth: int) -> bool:
        """A correct step slower than its state by no more than DETOUR_FLOOR, with a step left after it, on a path
        without a detour yet (two slow steps in a row are not repaid by one)."""
        return (attempt.status == "rejected" and attempt.correct is True and not attempt.within_noise
                and attempt.speedup is not None and DETOUR_FLOOR <= attempt.speedup < 1.0
                and depth < self.config.steps and not any(s.detour for s in node.steps))

    def opened_actions(self, attempt: Attempt, ranked: list[Ranked], kinds: frozenset[str] | None = None) -> list[str]:
        """Actions (of ``kinds``, if given) the kernel is offered after ``attempt`` and was not before it (grouped
        order opens persistent tiles: the suite's transposed matmul, H200, measured grouped order alone at 1.00x
        and dropped it), and those offered after it that its action pays with (``pays_with``: persistent tiles and
        TMA loads, each slower alone on the H200's square matmul, 1.13x together)."""
        if not attempt.new_text:
            return []
        before = {r.candidate.action for r in ranked}
        try:
            _analysis, after = self.offered_in(attempt.new_text)
        except Exception:  # noqa: BLE001 - an analysis failure only means nothing is known to open
            return []
        from .actions import ACTIONS

        partners = getattr(ACTIONS.get(attempt.candidate.action), "pays_with", frozenset())
        opened = {c.action for c in after if kinds is None or c.kind in kinds} - before
        opened |= {c.action for c in after if c.action in partners}
        return sorted(opened - {attempt.candidate.action})

    def offered_in(self, text: str) -> tuple[FileAnalysis, list[Candidate]]:
        """The analysis of ``text`` and every candidate for the kernel in it, once per text: a neutral step's
        state is listed to see what it opens, and listed again when it is expanded."""
        hit = self._offered.get(text)
        if hit is None:
            analysis = analyze(text, self.path)
            listed = self.list_candidates(analysis, self.kernel, self.target) if analysis.kernel(self.kernel) else []
            hit = self._offered[text] = (analysis, listed)
        return hit

    @staticmethod
    def select(children: list[_Node], beam: int) -> list[_Node]:
        """The ``beam`` best states (measured speed first, then correct steps, then confidence), and before them
        the best enabling state if it is not among them: its worth is the step it opens, which a sibling that
        is faster on its own must not take away before that step was tried (the suite's cross entropy, H200:
        a neutral row fusion lost to a 1.39x sibling, and the one-pass loop the fused kernel allows never ran).
        Whatever the frontier, the run's best state is already kept (``run``), so expanding it first costs nothing.
        The best detour state comes next: only the actions it opens are tried from it (``expand``), a verification
        or two, where a faster sibling's state may spend every try it has before the budget ends (the suite's square
        matmul, H200: persistent tiles kept at 0.98x, then their TMA loads 1.11x)."""
        ordered = sorted(children, key=lambda n: n.value(), reverse=True)
        chosen = ordered[:beam]
        detours = [n for n in ordered if n.steps and n.steps[-1].detour]
        if detours and detours[0] not in chosen:
            chosen = [detours[0], *chosen]
        enabling = [n for n in ordered if n.steps and n.steps[-1].enabling]
        if enabling and enabling[0] not in chosen:
            chosen = [enabling[0], *chosen]
        return chosen

    def result(self, best: _Node) -> OptimizeResult:
        _number_diffs(best.steps, self.path)
        if best.steps and not self.speed_measured:
            self.notes.append(SPEED_UNAVAILABLE_NOTE)
        if not getattr(self.policy, "trained", True):
            self.notes.append(f"policy: {self.policy.describe()}")
        result = OptimizeResult(
            path=self.path, kernel=self.kernel, target=self.target.key, policy=self.policy.describe(),
            original_text=self.text, final_text=best.text, steps=list(best.steps), attempts=self.attempts,
            speed_measured=self.speed_measured, stopped=self.stopped, notes=self.notes,
            elapsed_s=time.monotonic() - self.started,
        )
        if self.config.record is not None:
            self.config.record.end(result)
        return result


def _sweeps(candidate: Candidate) -> str | None:
    """The parameter ``candidate``'s action varies across variants of one step (``sweeps_variants``), or None."""
    from .actions import ACTIONS

    return getattr(ACTIONS.get(candidate.action), "sweeps_variants", None)


def _variants(a: Candidate, b: Candidate) -> bool:
    """Whether ``a`` and ``b`` are the same step of a sweeping action on the same kernel, differing in its variant."""
    param = _sweeps(a)
    if not param or (a.action, a.kernel) != (b.action, b.kernel) or a.key() == b.key():
        return False
    rest = {k: v for k, v in a.params.items() if k != param}
    return rest == {k: v for k, v in b.params.items() if k != param}


def _after_other_actions(queue: list[tuple[int, Ranked]], action: str) -> list[tuple[int, Ranked]]:
    """The queue with ``action``'s remaining candidates moved behind every other action's, each group in
    rank order: once one variant of an action failed to pay, the next try goes to a different idea (three
    pipelining depths used to spend a state's three tries while tiling waited)."""
    return [q for q in queue if q[1].candidate.action != action] + [q for q in queue if q[1].candidate.action == action]


def _emit(attempt: Attempt, on_step, record, state: PolicyState) -> None:
    if on_step is not None:
        on_step(attempt)
    if record is not None:
        record.step(state, attempt)


def _try(node: _Node, choice: Ranked, position: int, depth: int, path: str | None, target: GpuProfile,
         apply_one: Applier, verify: Verifier, cancel: CancelLike, deadline: float, seen: set[str],
         verified: dict[tuple[int, int], VerificationReport] | None = None) -> Attempt:
    """Apply one candidate to the node's text and verify it against that text (or reuse what the same edit of the
    same text measured before, in ``verified``)."""
    attempt = Attempt(
        depth=depth, candidate=choice.candidate, rank=position, score=choice.score, logprob=choice.logprob,
        status="rejected", reason="", parent_text=node.text, policy_metadata=dict(choice.metadata),
    )
    t0 = time.monotonic()
    try:
        edit = apply_one(node.text, choice.candidate, target)
    except ActionError as exc:
        attempt.status, attempt.reason = "not_applied", f"could not apply: {exc}"
        attempt.timings["apply_s"] = round(time.monotonic() - t0, 4)
        return attempt
    attempt.timings["apply_s"] = round(time.monotonic() - t0, 4)
    if edit.new_text == node.text:
        attempt.status, attempt.reason = "unchanged", "the action changed nothing"
        return attempt
    if edit.new_text in seen:
        attempt.status, attempt.reason = "revisit", "returns the file to a version already reached (a cycle)"
        return attempt
    attempt.new_text = edit.new_text
    attempt.changed_lines = edit.changed_lines
    attempt.diff = unified_diff(node.text, edit.new_text, path, "before", "after")

    def stop() -> bool:
        # Cancel the running verification when the user cancels or the budget is spent.
        return _cancelled(cancel) or time.monotonic() >= deadline

    key = (hash(node.text), hash(edit.new_text))
    report = verified.get(key) if verified is not None else None
    if report is not None:
        attempt.timings["reused_verification"] = True
    else:
        t0 = time.monotonic()
        report = verify(edit.new_text, node.text, stop)
        attempt.timings["verify_s"] = round(time.monotonic() - t0, 4)
    verdict = Verdict.of(report)
    attempt.compiled, attempt.correct = verdict.compiled, verdict.correct
    attempt.speedup, attempt.within_noise = verdict.speedup, verdict.within_noise
    attempt.reward, attempt.summary = verdict.reward, verdict.summary
    attempt.report = report.to_json()
    attempt.status, attempt.reason = verdict.decide()
    if verified is not None and "cancelled" not in attempt.reason:
        verified[key] = report
    return attempt


def best_first(attempts: Iterable[Attempt]) -> list[Attempt]:
    """Kept attempts ordered by measured speed-up, then policy score (for summaries)."""
    return sorted((a for a in attempts if a.kept), key=lambda a: (a.speedup or 0.0, a.score), reverse=True)
