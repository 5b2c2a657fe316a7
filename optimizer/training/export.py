"""Export a trained peft LoRA as a llama.cpp adapter GGUF that marks the policy trained.

Tensor names follow llama.cpp's Llama layout (``blk.N.attn_q.weight.lora_a`` / ``.lora_b``); the
query and key projections are permuted the way llama.cpp's converter permutes the base weights
(transformers un-permutes them when it reads a GGUF), so the adapter lines up with the rows of the
GGUF it was trained on. The ``mtmc.*`` keys say the file is the project's trained policy, from which
stage, on which data (the dataset header's provenance), with which schemas.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..trajectories import SCHEMA as TRAJECTORY_SCHEMA
from .dataset import DECISION_SCHEMA

GGUF_NAMES = {
    "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
    "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down",
}
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


def permute_rows(weights, n_head: int, n_head_kv: int | None = None):
    """llama.cpp converter's q/k row permutation (interleaved rotary halves), on a numpy array's rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = weights.shape
    return weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def lora_tensors(model) -> tuple[dict[str, Any], float, int]:
    """(GGUF tensor name -> float32 numpy array, lora alpha, rank) of a peft model's default adapter."""
    from peft import get_peft_model_state_dict

    config = model.get_base_model().config
    lora = model.peft_config["default"]
    weights = {k: v.detach().float().cpu().numpy() for k, v in get_peft_model_state_dict(model).items()}
    return (gguf_lora_tensors(weights, config.num_attention_heads, getattr(config, "num_key_value_heads", None)),
            float(lora.lora_alpha), int(lora.r))


def saved_lora_tensors(adapter_dir: str | Path, base_gguf: str | Path | None = None) -> tuple[dict[str, Any], float, int]:
    """The same from a saved peft adapter folder (no model needed); head counts from the base GGUF."""
    import gguf
    from safetensors.numpy import load_file

    from ..policy.factory import default_model_path

    folder = Path(adapter_dir)
    config = json.loads((folder / "adapter_config.json").read_text())
    fields = gguf.GGUFReader(str(base_gguf or default_model_path())).fields
    weights = {k: v.astype("float32") for k, v in load_file(str(folder / "adapter_model.safetensors")).items()}
    heads = int(fields["llama.attention.head_count"].contents())
    kv_heads = int(fields["llama.attention.head_count_kv"].contents())
    return gguf_lora_tensors(weights, heads, kv_heads), float(config["lora_alpha"]), int(config["r"])


def gguf_lora_tensors(weights: dict[str, Any], n_head: int, n_head_kv: int | None) -> dict[str, Any]:
    """peft LoRA weights (numpy) renamed to llama.cpp's tensors, q/k ``lora_b`` rows permuted like the base."""
    tensors: dict[str, Any] = {}
    for key, array in weights.items():
        found = _KEY.search(key)
        if found is None or found.group(2) not in GGUF_NAMES:
            raise ValueError(f"cannot map the LoRA weight {key} to a llama.cpp tensor")
        layer, module, part = found.groups()
        if part == "B" and module == "q_proj":
            array = permute_rows(array, n_head, n_head)
        elif part == "B" and module == "k_proj":
            array = permute_rows(array, n_head, n_head_kv)
        tensors[f"blk.{layer}.{GGUF_NAMES[module]}.weight.lora_{part.lower()}"] = array
    return tensors


def export_adapter(model, path: str | Path, stage: str, provenance: dict | None = None,
                   training: dict | None = None, base_model: str = "") -> Path:
    """Write ``model``'s LoRA as an adapter GGUF with ``mtmc.policy.trained = true`` and the provenance."""
    return write_adapter_gguf(lora_tensors(model), path, stage, provenance, training, base_model)


def write_adapter_gguf(lora: tuple[dict[str, Any], float, int], path: str | Path, stage: str,
                       provenance: dict | None = None, training: dict | None = None, base_model: str = "") -> Path:
    """Write (tensors, alpha, rank) in llama.cpp's adapter layout with the ``mtmc.*`` keys."""
    import gguf

    tensors, alpha, rank = lora
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("general.name", f"mtmc-lsp policy LoRA ({stage})")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    writer.add_bool("mtmc.policy.trained", True)
    writer.add_string("mtmc.training.stage", stage)
    writer.add_uint32("mtmc.lora.rank", rank)
    writer.add_string("mtmc.base_model", base_model)
    writer.add_string("mtmc.trajectory.schema", TRAJECTORY_SCHEMA)
    writer.add_string("mtmc.decision.schema", DECISION_SCHEMA)
    writer.add_string("mtmc.training.provenance", json.dumps(provenance or {}, sort_keys=True, default=str))
    writer.add_string("mtmc.training.summary", json.dumps(training or {}, sort_keys=True, default=str))
    for name, array in sorted(tensors.items()):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def read_mtmc_metadata(path: str | Path) -> dict[str, Any]:
    """The ``mtmc.*`` keys of a GGUF file (adapter or model), decoded."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("mtmc."):
            out[name] = field.contents()
    return out
