"""Behaviour cloning: fine-tune a LoRA so the policy picks the best chains' actions from each state.

Each decision with a chosen action (by default only states on an episode's best chain) is one
example: the prompt exactly as the policy renders it, then the chosen action's tokens. The loss is
the chosen action's negative log-probability under the grammar (what ``LlamaCppPolicy.rank`` scores:
next-token probabilities renormalised over the offered actions at each branch of their trie), plus
``sft_weight`` times the plain token cross-entropy of the action text (what unconstrained decoding
would write).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .dataset import Decision
from .scoring import BranchPlan, decision_plans, index_of, seeded, sequence_logprobs, trainable_parameters


@dataclass
class BCConfig:
    """Optimisation knobs of a BC run."""

    steps: int = 200
    batch_size: int = 8
    lr: float = 2e-4
    sft_weight: float = 0.1
    chains_only: bool = True  # only the states on each episode's best chain
    seed: int = 0
    log_every: int = 1


@dataclass
class TrainLog:
    """The curve of a run: one row per logged step, plus what it was trained on."""

    stage: str
    config: dict
    examples: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path

    def finish(self, model, started: float, out: str | Path | None) -> "TrainLog":
        """Close a run: its time, the model back in eval mode, and the adapter plus this log in ``out``."""
        self.seconds = round(time.monotonic() - started, 3)
        model.eval()
        if out is not None:
            model.save_pretrained(str(Path(out)))
            self.write(Path(out) / "train_log.json")
        return self


def bc_examples(decisions: list[Decision], chains_only: bool = True) -> list[tuple[Decision, int]]:
    """(decision, index of the chosen action among the offered) for every usable decision."""
    out = []
    for d in decisions:
        if d.chosen is None or (chains_only and not d.chain):
            continue
        out.append((d, index_of(d, d.chosen)))
    return out


def train_bc(model, decisions: list[Decision], config: BCConfig | None = None, out: str | Path | None = None) -> TrainLog:
    """Train ``model`` (a peft LoRA model) in place; save the adapter and the curve under ``out``."""
    import torch

    config = config or BCConfig()
    examples = bc_examples(decisions, config.chains_only)
    if not examples:
        raise ValueError("no decision with a chosen action to clone (is the dataset empty or all off-chain?)")
    rng = seeded(config.seed)
    plans = {id(d): decision_plans(d) for d, _ in examples}
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=config.lr)
    log = TrainLog("bc", asdict(config), len(examples))
    started = time.monotonic()
    model.train()
    for step in range(1, config.steps + 1):
        batch = rng.sample(examples, min(config.batch_size, len(examples)))  # distinct states per step
        loss_sum, nll_sum, correct = 0.0, 0.0, 0
        optimizer.zero_grad()
        for decision, chosen in batch:
            plan: BranchPlan = plans[id(decision)][chosen]
            constrained, raw = sequence_logprobs(model, decision.prompt_ids, [plan], sft=config.sft_weight > 0)
            loss = -constrained[0] + (config.sft_weight * -raw[0] / len(plan.sequence) if raw is not None else 0.0)
            (loss / len(batch)).backward()
            loss_sum += float(loss.detach())
            nll_sum += float(-constrained[0].detach())
            correct += float(constrained[0].detach()) > math.log(0.5)  # the chosen action holds most of the mass
        optimizer.step()
        if step % config.log_every == 0 or step == config.steps:
            log.rows.append({"step": step, "loss": loss_sum / len(batch), "chosen_nll": nll_sum / len(batch),
                             "chosen_majority": correct / len(batch)})
    return log.finish(model, started, out)


def chosen_probability(model, decisions: list[Decision], chains_only: bool = True) -> float:
    """Mean grammar-constrained probability of the chosen action (no gradients): BC's progress measure."""
    import torch

    examples = bc_examples(decisions, chains_only)
    with torch.no_grad():
        probs = [math.exp(float(sequence_logprobs(model, d.prompt_ids, [decision_plans(d)[i]])[0][0])) for d, i in examples]
    return sum(probs) / max(len(probs), 1)
