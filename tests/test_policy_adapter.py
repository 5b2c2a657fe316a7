"""A LoRA adapter in GGUF loads on top of the embedded model, changes its ranking and marks it trained."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="the embedded policy needs llama-cpp-python")
gguf = pytest.importorskip("gguf", reason="writing a test adapter needs the gguf package (dev extra)")

from mtmc_lsp.optimizer.actions import applicable  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402
from mtmc_lsp.optimizer.policy import PolicyState, default_model_path, make_policy  # noqa: E402
from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy  # noqa: E402
from mtmc_lsp.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RANK = 4


def write_lora_adapter(path: Path, scale: float, seed: int = 0) -> Path:
    """A random rank-4 LoRA on every attention query projection, in llama.cpp's adapter GGUF layout."""
    base = gguf.GGUFReader(str(default_model_path()))
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(RANK))
    for tensor in base.tensors:
        if not tensor.name.endswith("attn_q.weight"):
            continue
        n_in, n_out = (int(x) for x in tensor.shape)  # GGUF order: ne[0] is the input dimension
        writer.add_tensor(tensor.name + ".lora_a", (rng.standard_normal((RANK, n_in)) / np.sqrt(n_in)).astype(np.float32))
        writer.add_tensor(tensor.name + ".lora_b", (scale * rng.standard_normal((n_out, RANK))).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def matmul_state():
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h100"))
    return state, applicable(analysis, state.kernel, state.target)


def scores(policy: LlamaCppPolicy) -> dict[str, float]:
    state, candidates = matmul_state()
    try:
        return {r.candidate.key(): r.score for r in policy.rank(state, candidates)}
    finally:
        policy.close()


def test_an_adapter_changes_the_ranking_and_marks_the_policy_trained(tmp_path):
    adapter = write_lora_adapter(tmp_path / "policy-lora.gguf", scale=0.5)
    policy = make_policy(Settings(policy_adapter_path=str(adapter)))
    assert isinstance(policy, LlamaCppPolicy) and "LoRA policy-lora.gguf" in policy.describe()
    with_adapter = scores(policy)
    assert policy.trained and "untrained" not in policy.describe()
    base = LlamaCppPolicy(str(default_model_path()))
    without = scores(base)
    assert not base.trained
    assert with_adapter.keys() == without.keys() and sum(with_adapter.values()) == pytest.approx(1.0, abs=1e-6)
    assert max(abs(with_adapter[k] - without[k]) for k in without) > 0.01


def test_a_zero_adapter_leaves_the_ranking_as_it_was(tmp_path):
    adapter = write_lora_adapter(tmp_path / "zero-lora.gguf", scale=0.0)
    with_adapter = scores(LlamaCppPolicy(str(default_model_path()), adapter_path=str(adapter)))
    without = scores(LlamaCppPolicy(str(default_model_path())))
    for key, score in without.items():
        assert with_adapter[key] == pytest.approx(score, abs=1e-4)


def test_an_adapter_for_another_model_is_refused_with_the_heuristic_as_fallback(tmp_path):
    adapter = tmp_path / "wrong-shape.gguf"
    writer = gguf.GGUFWriter(str(adapter), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", 1.0)
    writer.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((RANK, 100), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((100, RANK), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    policy = LlamaCppPolicy(str(default_model_path()), adapter_path=str(adapter))
    state, candidates = matmul_state()
    ranked = policy.rank(state, candidates)
    assert policy.status == "failed" and "could not load the LoRA adapter" in policy.error and "failed to load" in policy.describe()
    assert "heuristic ranking" in ranked[0].metadata["fallback"]
