"""RL over the explored tree: reward-weighted regression over sibling actions, anchored to the BC policy.

For each state with at least two siblings whose reward was measured, the target distribution puts
weight ``softmax(reward / temperature)`` on them; the loss is that weighted negative log-probability
of the policy's choice *among those siblings* (its grammar-constrained probabilities renormalized over
them: the choice the loop makes between measured alternatives) plus ``kl_coef`` times KL(BC policy ||
current policy) over every offered action, so the policy moves towards what measured best without
forgetting what it cloned. (Weighting the log-probability over every offered action instead moved mass
onto all measured siblings at once and, on a tiny model, lowered the expected reward of the choice
among them while raising the objective.) The curve logs the loss, the KL, the expected reward of the
policy's choice among the measured siblings, and how often its first choice is the best one.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .bc import TrainLog
from .dataset import Decision
from .scoring import decision_plans, index_of, seeded, sequence_logprobs, trainable_parameters


@dataclass
class RLConfig:
    """Optimisation knobs of an RL run."""

    steps: int = 100
    batch_size: int = 4
    lr: float = 5e-5
    temperature: float = 0.1  # reward scale of the weights: log-speedups differ by ~0.1 between good siblings
    kl_coef: float = 0.1
    seed: int = 0
    log_every: int = 1


def rl_examples(decisions: list[Decision]) -> list[tuple[Decision, list[int], list[float]]]:
    """(decision, offered indices of the rewarded siblings, their rewards) for states with >= 2 of them."""
    out = []
    for d in decisions:
        if not d.offered_complete:
            continue  # the grammar's normalisation needs every offered action
        rewarded = d.rewarded()
        if len(rewarded) >= 2:
            out.append((d, [index_of(d, s.text) for s in rewarded], [float(s.reward) for s in rewarded]))
    return out


def _weights(rewards: list[float], temperature: float) -> list[float]:
    top = max(rewards)
    exps = [math.exp((r - top) / temperature) for r in rewards]
    return [e / sum(exps) for e in exps]


def train_rl(model, decisions: list[Decision], config: RLConfig | None = None, out: str | Path | None = None) -> TrainLog:
    """Train ``model`` (the BC LoRA model, trainable) in place; save the adapter and the curve under ``out``."""
    import torch

    config = config or RLConfig()
    examples = rl_examples(decisions)
    if not examples:
        raise ValueError("no state with two or more measured siblings: nothing to compare")
    rng = seeded(config.seed)
    plans = {id(d): decision_plans(d) for d, _, _ in examples}
    model.eval()
    with torch.no_grad():  # the anchor: the policy as RL found it (the BC policy)
        reference = {id(d): sequence_logprobs(model, d.prompt_ids, plans[id(d)])[0].detach() for d, _, _ in examples}
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=config.lr)
    log = TrainLog("rl", asdict(config), len(examples))
    started = time.monotonic()
    model.train()
    for step in range(1, config.steps + 1):
        batch = rng.sample(examples, min(config.batch_size, len(examples)))  # distinct states per step
        optimizer.zero_grad()
        totals = {"loss": 0.0, "kl": 0.0, "expected_reward": 0.0, "best_first": 0.0}
        for decision, indices, rewards in batch:
            logp, _ = sequence_logprobs(model, decision.prompt_ids, plans[id(decision)])
            ref = reference[id(decision)]
            weights = torch.tensor(_weights(rewards, config.temperature), dtype=logp.dtype)
            # Among the measured siblings, renormalized: the choice the loop makes between measured alternatives.
            regression = -(weights * torch.log_softmax(logp[indices], 0)).sum()
            kl = (ref.exp() * (ref - logp)).sum()
            loss = regression + config.kl_coef * kl
            (loss / len(batch)).backward()
            with torch.no_grad():
                probs = logp[indices].exp()
                totals["loss"] += float(loss)
                totals["kl"] += float(kl)
                totals["expected_reward"] += float((probs / probs.sum() * torch.tensor(rewards)).sum())
                totals["best_first"] += float(rewards[int(probs.argmax())] == max(rewards))
        optimizer.step()
        if step % config.log_every == 0 or step == config.steps:
            log.rows.append({"step": step, **{k: v / len(batch) for k, v in totals.items()}})
    return log.finish(model, started, out)


def policy_quality(model, decisions: list[Decision]) -> dict[str, float]:
    """Expected measured reward of the policy's choice among rewarded siblings, and best-first rate."""
    import torch

    examples = rl_examples(decisions)
    expected, best = 0.0, 0.0
    with torch.no_grad():
        for d, indices, rewards in examples:
            probs = sequence_logprobs(model, d.prompt_ids, decision_plans(d))[0][indices].exp()
            expected += float((probs / probs.sum() * torch.tensor(rewards)).sum())
            best += float(rewards[int(probs.argmax())] == max(rewards))
    n = max(len(examples), 1)
    return {"expected_reward": expected / n, "best_first": best / n, "states": len(examples)}
