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

import difflib
import inspect
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .actions.base import ActionError, Candidate, Edit
from .analysis import FileAnalysis, analyze
from .hardware import GpuProfile
from .policy.base import Policy, PolicyState, Ranked, StepOutcome, candidate_text

# verify(new_text, old_text, cancel) -> VerificationReport (see ``make_verifier``).
Verifier = Callable[..., Any]
CancelLike = Callable[[], bool] | threading.Event | None

STANDING_STILL_REWARD = 0.4  # compile 0.1 + correct 0.3 + log(1)
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

    @property
    def kept(self) -> bool:
        return self.status == "kept"

    def outcome(self) -> StepOutcome:
        return StepOutcome(self.candidate, self.compiled, self.correct, self.speedup, self.reward, self.kept)

    def to_json(self, with_texts: bool = False) -> dict[str, Any]:
        data = {
            "depth": self.depth, "candidate": self.candidate.to_json(), "action": candidate_text(self.candidate),
            "rank": self.rank, "score": self.score, "logprob": self.logprob, "status": self.status,
            "reason": self.reason, "compiled": self.compiled, "correct": self.correct, "speedup": self.speedup,
            "withinNoise": self.within_noise, "reward": self.reward, "summary": self.summary, "diff": self.diff,
            "changedLines": self.changed_lines, "timings": dict(self.timings), "policy": dict(self.policy_metadata),
            "report": self.report,
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

    def value(self) -> tuple[float, int, float]:
        """Measured log-speedup first, then how many correct steps, then the policy's confidence."""
        log_speed = sum(math.log(s.speedup) for s in self.steps if s.speedup and s.speedup > 0)
        return (log_speed, len(self.steps), sum(s.score for s in self.steps))


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


def read_report(report: Any) -> dict[str, Any]:
    """The fields the loop decides on, from a ``VerificationReport`` (or its JSON form)."""
    get = (lambda k, d=None: report.get(k, d)) if isinstance(report, dict) else (lambda k, d=None: getattr(report, k, d))
    speed = get("speed")
    sget = (lambda k, d=None: speed.get(k, d)) if isinstance(speed, dict) else (lambda k, d=None: getattr(speed, k, d))
    speedup = within_noise = None
    if speed is not None and sget("believed", True):
        speedup = sget("speedup")
        band = sget("band", 0.0) or 0.0
        within_noise = speedup is not None and abs(speedup - 1.0) <= band
    reward = get("reward")
    total = reward.get("total") if isinstance(reward, dict) else getattr(reward, "total", None)
    return {
        "status": get("status", ""), "compiled": get("compiled"), "correct": get("correct"),
        "speedup": speedup, "within_noise": within_noise, "reward": total, "summary": get("summary", ""),
        "mode": get("mode"), "device": get("device", ""),
    }


def _cancelled(cancel: CancelLike) -> bool:
    if cancel is None:
        return False
    if isinstance(cancel, threading.Event):
        return cancel.is_set()
    return bool(cancel())


def optimize(
    text: str,
    path: str | None = None,
    kernel: str | None = None,
    target: GpuProfile | None = None,
    policy: Policy | None = None,
    verify: Verifier | None = None,
    steps: int = 3,
    beam: int = 1,
    budget_s: float = 600.0,
    on_step: Callable[[Attempt], None] | None = None,
    cancel: CancelLike = None,
    record: Any = None,
    **options: Any,
) -> OptimizeResult:
    """Run the MTMC loop on ``kernel`` (every kernel in turn when None) for ``steps`` kept steps each.

    ``target`` defaults to the local GPU (else H100), ``policy`` to the embedded model, and
    ``verify(new_text, old_text, cancel)`` to ``verify_file`` for ``path`` and ``target``.
    Keyword-only ``options``: ``allow_precision``; ``candidates`` and ``apply`` (to replace the
    action registry); ``on_rank(depth, ranked)``; ``tries``, the verifications per state before
    giving up on it (default 3 x beam: a rejected step lets the next-ranked candidate try).
    """
    if target is None:
        from .hardware import resolve_target

        target = resolve_target("")
    if policy is None:
        from .policy import make_policy

        policy = make_policy(None)
    verify = verify or make_verifier(path, target)
    if kernel is not None:
        return _optimize_kernel(text, path, kernel, target, policy, verify, steps, beam, budget_s, on_step, cancel,
                                record, **options)
    started = time.monotonic()
    options.setdefault("seen", {text})  # versions already reached: a step back to one is a cycle
    names = [k.name for k in analyze(text, path).kernels]
    current, steps_all, attempts, notes, stopped, measured = text, [], [], [], "no candidates", False
    for name in names:
        left = budget_s - (time.monotonic() - started)
        if left <= 0 or _cancelled(cancel):
            stopped = "cancelled" if _cancelled(cancel) else "budget"
            break
        if analyze(current, path).kernel(name) is None:
            notes.append(f"kernel {name} was removed by an earlier step (fused)")
            continue
        part = _optimize_kernel(current, path, name, target, policy, verify, steps, beam, left, on_step, cancel,
                                record, **options)
        current = part.final_text
        steps_all += part.steps
        attempts += part.attempts
        measured = measured or part.speed_measured
        notes += [n for n in part.notes if n not in notes]
        stopped = part.stopped
    # Renumber the diffs across kernels: each kept step follows the one before it in the file.
    for i, step in enumerate(steps_all, start=1):
        step.diff = unified_diff(step.parent_text, step.new_text, path, "original" if i == 1 else f"step {i - 1}", f"step {i}")
    return OptimizeResult(
        path=path, kernel=",".join(names), target=target.key, policy=policy.describe(), original_text=text,
        final_text=current, steps=steps_all, attempts=attempts, speed_measured=measured, stopped=stopped,
        notes=notes, elapsed_s=time.monotonic() - started,
    )


def _optimize_kernel(
    text: str,
    path: str | None,
    kernel: str,
    target: GpuProfile,
    policy: Policy,
    verify: Verifier,
    steps: int = 3,
    beam: int = 1,
    budget_s: float = 600.0,
    on_step: Callable[[Attempt], None] | None = None,
    cancel: CancelLike = None,
    record: Any = None,
    *,
    allow_precision: bool = False,
    candidates: Callable[[FileAnalysis, str, GpuProfile], list[Candidate]] | None = None,
    apply: Callable[[str, Candidate, GpuProfile], Edit] | None = None,
    on_rank: Callable[[int, list[Ranked]], None] | None = None,
    tries: int | None = None,
    seen: set[str] | None = None,
) -> OptimizeResult:
    """The loop for one kernel: at most ``steps`` kept steps within ``budget_s`` seconds."""
    from . import actions

    list_candidates = candidates or (lambda a, k, t: actions.applicable(a, k, t, allow_precision))
    apply_one = apply or actions.apply_candidate
    started = time.monotonic()
    deadline = started + max(0.0, budget_s)
    beam = max(1, int(beam))
    tries = max(beam, int(tries)) if tries else 3 * beam  # verifications per state at most
    seen = seen if seen is not None else set()
    seen.add(text)
    root = _Node(text, [])
    frontier = [root]
    best = root
    attempts: list[Attempt] = []
    tried: set[tuple[int, str]] = set()
    speed_measured = False
    stopped = "steps"
    notes: list[str] = []
    if record is not None:
        record.begin(path=path, kernel=kernel, target=target, policy=policy.describe(), text=text,
                     steps=steps, beam=beam, budget_s=budget_s)

    def out_of_time() -> bool:
        return time.monotonic() >= deadline

    def stop_now() -> bool:
        return _cancelled(cancel) or out_of_time()

    for depth in range(1, max(0, steps) + 1):
        children: list[_Node] = []
        saw_candidates = False
        for node in frontier:
            if stop_now():
                break
            analysis = analyze(node.text, path)
            found = analysis.kernel(kernel)
            if found is None:
                stopped = "kernel gone"
                notes.append(f"kernel {kernel} is no longer in the file after step {depth - 1}")
                continue
            state = PolicyState(analysis, found, target, [s.outcome() for s in node.steps])
            offered = [c for c in list_candidates(analysis, kernel, target) if (hash(node.text), c.key()) not in tried]
            if not offered:
                continue
            saw_candidates = True
            t0 = time.monotonic()
            ranked = policy.rank(state, offered)
            rank_s = time.monotonic() - t0
            if on_rank is not None:
                on_rank(depth, ranked)
            applied = kept = 0
            for position, choice in enumerate(ranked):
                # Down the policy's list until `beam` steps are kept or the tries per state run out.
                if kept >= beam or applied >= tries or stop_now():
                    break
                tried.add((hash(node.text), choice.candidate.key()))
                attempt = _try(node, choice, position, depth, path, target, apply_one, verify, cancel, deadline, seen)
                attempt.timings["rank_s"] = round(rank_s, 4)
                if attempt.status in ("not_applied", "unchanged", "revisit"):
                    attempts.append(attempt)
                    _emit(attempt, on_step, record, state)
                    continue
                applied += 1
                speed_measured = speed_measured or attempt.speedup is not None
                attempts.append(attempt)
                _emit(attempt, on_step, record, state)
                if attempt.kept:
                    kept += 1
                    seen.add(attempt.new_text)
                    child = _Node(attempt.new_text, node.steps + [attempt])
                    children.append(child)
                    if child.value() > best.value():
                        best = child
        if _cancelled(cancel):
            stopped = "cancelled"
            break
        if out_of_time():
            stopped = "budget"
            break
        if not children:
            if stopped != "kernel gone":
                stopped = "no improvement" if saw_candidates else "no candidates"
            break
        children.sort(key=lambda n: n.value(), reverse=True)
        frontier = children[:beam]

    # The kept steps of the best path, numbered and diffed one after another.
    for i, step in enumerate(best.steps, start=1):
        step.diff = unified_diff(step.parent_text, step.new_text, path, "original" if i == 1 else f"step {i - 1}", f"step {i}")
    if best.steps and not speed_measured:
        notes.append(SPEED_UNAVAILABLE_NOTE)
    if not getattr(policy, "trained", True):
        notes.append(f"policy: {policy.describe()}")
    result = OptimizeResult(
        path=path, kernel=kernel, target=target.key, policy=policy.describe(), original_text=text,
        final_text=best.text, steps=list(best.steps), attempts=attempts, speed_measured=speed_measured,
        stopped=stopped, notes=notes, elapsed_s=time.monotonic() - started,
    )
    if record is not None:
        record.end(result)
    return result


def _emit(attempt: Attempt, on_step, record, state: PolicyState) -> None:
    if on_step is not None:
        on_step(attempt)
    if record is not None:
        record.step(state, attempt)


def _try(node: _Node, choice: Ranked, position: int, depth: int, path: str | None, target: GpuProfile,
         apply_one, verify: Verifier, cancel: CancelLike, deadline: float, seen: set[str]) -> Attempt:
    """Apply one candidate to the node's text and verify it against that text."""
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

    t0 = time.monotonic()
    report = _call_verify(verify, edit.new_text, node.text, stop)
    attempt.timings["verify_s"] = round(time.monotonic() - t0, 4)
    fields = read_report(report)
    attempt.compiled, attempt.correct = fields["compiled"], fields["correct"]
    attempt.speedup, attempt.within_noise = fields["speedup"], fields["within_noise"]
    attempt.reward, attempt.summary = fields["reward"], fields["summary"]
    attempt.report = report.to_json() if hasattr(report, "to_json") else (report if isinstance(report, dict) else None)
    attempt.status, attempt.reason = _decide(fields)
    return attempt


def _call_verify(verify: Verifier, new_text: str, old_text: str, stop: Callable[[], bool]):
    try:
        params = inspect.signature(verify).parameters
    except (TypeError, ValueError):
        params = {}
    if "cancel" in params or len(params) >= 3:
        return verify(new_text, old_text, stop)
    return verify(new_text, old_text)


def _decide(fields: dict[str, Any]) -> tuple[str, str]:
    """Keep or reject one verified step, and why."""
    if fields["compiled"] is False:
        return "rejected", f"does not compile ({fields['status']})"
    if fields["correct"] is not True:
        why = "wrong results" if fields["correct"] is False else f"not verified ({fields['status']})"
        return "rejected", why
    speedup = fields["speedup"]
    if speedup is None:
        return "kept", "correct; speed unavailable, kept on correctness"
    if fields["within_noise"]:
        return "rejected", f"{speedup:.2f}x is within the measurement noise: no improvement"
    reward = fields["reward"] if fields["reward"] is not None else STANDING_STILL_REWARD
    if speedup > 1.0 and reward > STANDING_STILL_REWARD:
        return "kept", f"correct and {speedup:.2f}x faster (reward {reward:.3f})"
    return "rejected", f"correct but {speedup:.2f}x: slower than the previous step"


def best_first(attempts: Iterable[Attempt]) -> list[Attempt]:
    """Kept attempts ordered by measured speed-up, then policy score (for summaries)."""
    return sorted((a for a in attempts if a.kept), key=lambda a: (a.speedup or 0.0, a.score), reverse=True)
