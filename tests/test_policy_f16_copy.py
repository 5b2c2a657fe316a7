"""The F16 copy of the bundled Q4_1 model: made once, reused, ranks like the original, never fatal."""

from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="the embedded policy needs llama-cpp-python")

from mtmc_lsp.optimizer.actions import applicable  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402
from mtmc_lsp.optimizer.policy import PolicyState, default_model_path  # noqa: E402
from mtmc_lsp.optimizer.policy.f16_copy import cache_folder, f16_copy  # noqa: E402
from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache") / "models"  # what MTMC_CACHE_DIR=<its parent> points at
    path, why = f16_copy(default_model_path(), folder)
    return folder, path, why


def test_a_quantized_small_model_gets_one_cached_f16_copy(copied):
    folder, path, why = copied
    assert path.parent == folder and path.name.endswith(".f16.gguf") and "made now" in why
    assert path.stat().st_size > 2 * default_model_path().stat().st_size  # 16 bits a weight instead of 5
    again, why_again = f16_copy(default_model_path(), folder)
    assert again == path and "made now" not in why_again
    assert [p.name for p in folder.iterdir()] == [path.name]  # no partial files left behind


def test_an_f16_model_is_used_as_it_is(copied):
    _, path, _ = copied
    same, why = f16_copy(path, path.parent / "elsewhere")
    assert same == path and "not quantized" in why


def test_an_unreadable_model_or_cache_keeps_the_source(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    assert f16_copy(bad, tmp_path / "models")[0] == bad
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    source, why = f16_copy(default_model_path(), blocker / "models")  # the cache cannot be created
    assert source == default_model_path() and why.startswith("no F16 copy")


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MTMC_CACHE_DIR", str(tmp_path))
    assert cache_folder() == tmp_path / "models"
    monkeypatch.delenv("MTMC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "mtmc-lsp" / "models"


def test_the_copy_ranks_like_the_quantized_original(copied, monkeypatch):
    folder, path, _ = copied
    monkeypatch.setenv("MTMC_CACHE_DIR", str(folder.parent))  # the copy made above: no second conversion
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h100"))
    candidates = applicable(analysis, state.kernel, state.target)
    original = LlamaCppPolicy(str(default_model_path()), use_f16_copy=False)
    fast = LlamaCppPolicy(str(default_model_path()), use_f16_copy=True)
    try:
        slow_ranking = {r.candidate.key(): r.score for r in original.rank(state, candidates)}
        fast_ranking = {r.candidate.key(): r.score for r in fast.rank(state, candidates)}
        assert original.compute_path == original.model_path
        assert fast.compute_path == str(path) and "computed in F16" in fast.describe()
    finally:
        original.close()
        fast.close()
    # Not bit-identical: llama.cpp rounds activations to 8 bits for Q4_1 dot products, not for F16 ones.
    for key, score in slow_ranking.items():
        assert fast_ranking[key] == pytest.approx(score, abs=0.05)
