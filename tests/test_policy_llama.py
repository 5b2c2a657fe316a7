"""The embedded policy: the real default GGUF through llama-cpp-python, grammar-constrained proposals."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="the embedded policy needs llama-cpp-python")

from mtmc_lsp.optimizer.actions import applicable  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402
from mtmc_lsp.optimizer.policy import PolicyState, StepOutcome, candidate_texts, default_model_path, make_policy  # noqa: E402
from mtmc_lsp.optimizer.policy.grammar import choice_grammar  # noqa: E402
from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy  # noqa: E402
from mtmc_lsp.settings import Settings  # noqa: E402

from corpus.kernels import kernel_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = sorted((ROOT / "mtmc_lsp" / "examples").glob("[!_]*.py"))
KERNEL_FILES = EXAMPLE_FILES + [p for p in kernel_files() if p not in EXAMPLE_FILES]  # each file once


@pytest.fixture(scope="module")
def policy():
    chosen = make_policy(Settings())  # the default: embedded
    assert isinstance(chosen, LlamaCppPolicy), chosen.describe()
    assert chosen.status == "not loaded"  # lazy: nothing loaded until asked
    chosen.load()
    yield chosen
    chosen.close()


def kernel_states(target="h100"):
    for path in KERNEL_FILES:
        analysis = analyze(path.read_text(), str(path))
        for kernel in analysis.kernels:
            yield path, PolicyState(analysis, kernel, get_profile(target))


def test_default_model_is_the_bundled_smollm2():
    path = default_model_path()
    assert path is not None and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50e6


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_corpus_kernel_gets_grammar_valid_applicable_proposals(policy):
    seen = 0
    for path, state in kernel_states():
        candidates = applicable(state.analysis, state.kernel, state.target)
        if not candidates:
            continue
        seen += 1
        ranked = policy.rank(state, candidates)
        assert sorted(r.candidate.key() for r in ranked) == sorted(c.key() for c in candidates), path
        assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
        assert sum(r.score for r in ranked) == pytest.approx(1.0, abs=1e-6)
        assert all(r.logprob is not None and r.logprob <= 0 for r in ranked)
        assert all(r.score == pytest.approx(math.exp(r.logprob)) for r in ranked)
        assert all(r.metadata["trained"] is False and "untrained" in r.metadata["note"] for r in ranked)
        text, chosen = policy.propose(state, candidates)
        assert chosen is not None, f"{path.name}:{state.kernel.name}: the model wrote {text!r}"
        assert text in candidate_texts(candidates) and chosen in candidates
        assert policy.grammar_accepts(choice_grammar(candidate_texts(candidates)), text)
    assert seen >= 5


def test_grammar_rejects_actions_that_do_not_apply(policy):
    matmul = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    softmax = analyze((ROOT / "mtmc_lsp" / "examples" / "softmax.py").read_text())
    h100 = get_profile("h100")
    offered = candidate_texts(applicable(matmul, matmul.kernels[0], h100))
    grammar = choice_grammar(offered)
    assert all(policy.grammar_accepts(grammar, text) for text in offered)
    # Actions that apply to another kernel, made-up parameters, unknown actions, and fragments.
    elsewhere = [t for t in candidate_texts(applicable(softmax, softmax.kernels[0], h100)) if t not in offered]
    assert elsewhere
    for text in elsewhere + ["tiling(BLOCK_K=64, BLOCK_M=512, BLOCK_N=512)", "fusion()", offered[0][:-1], offered[0] + " now"]:
        assert not policy.grammar_accepts(grammar, text), text


def test_prompt_holds_analysis_hardware_and_history(policy):
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    kernel = analysis.kernels[0]
    candidates = applicable(analysis, kernel, get_profile("a100"))
    step = StepOutcome(candidates[0], compiled=True, correct=True, speedup=None, reward=0.4, kept=True)
    prompt = policy.prompt(PolicyState(analysis, kernel, get_profile("a100"), [step]), candidate_texts(candidates))
    assert "A100" in prompt and "163 KiB shared" in prompt and "cp.async" in prompt
    assert "tl.dot inside a loop" in prompt and "BLOCK_M=32" in prompt
    assert candidate_texts(candidates[:1])[0] + " -> compiled, correct, speed not measured, kept" in prompt


@pytest.mark.slow
def test_history_changes_the_ranking_input_and_reuses_the_prompt_cache(policy):
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h100"))
    candidates = applicable(analysis, state.kernel, state.target)
    first = policy.rank(state, candidates)
    again = policy.rank(state, candidates)
    assert [r.logprob for r in first] == [r.logprob for r in again]  # same prompt: served from the cache
    state.history.append(StepOutcome(first[0].candidate, True, False, None, 0.1, False))
    after = policy.rank(state, candidates)
    assert {r.candidate.key(): r.logprob for r in after} != {r.candidate.key(): r.logprob for r in first}


def test_grammar_scores_skip_forced_tokens_without_changing_the_ranking():
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h100"))
    candidates = applicable(analysis, state.kernel, state.target)
    exact = LlamaCppPolicy(str(default_model_path()), exact_logprob=True)
    small_batches = LlamaCppPolicy(str(default_model_path()), max_parallel=3)
    try:
        full = {r.candidate.key(): r for r in exact.rank(state, candidates)}
        split = {r.candidate.key(): r for r in small_batches.rank(state, candidates)}
    finally:
        exact.close()
        small_batches.close()
    assert all(r.metadata["raw_logprob"] < r.logprob for r in full.values())  # forced tokens cost log-probability
    # Scoring in groups of 3 keeps one normalisation over all candidates; batch shapes move the
    # quantised model's numbers a little, the ranking's probabilities stay within a few percent.
    assert sum(r.score for r in split.values()) == pytest.approx(1.0, abs=1e-6)
    for key, r in full.items():
        assert split[key].score == pytest.approx(r.score, abs=0.03)


def test_candidates_do_not_see_each_other_in_the_shared_batch(policy):
    engine = policy._engine
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    prompt = engine.tokenize(policy.prompt(PolicyState(analysis, analysis.kernels[0], get_profile("h100")), []), special=True)
    eos = engine.model.token_eos()
    mine = engine.tokenize("warps(num_warps=2)", special=False) + [eos]
    others_a = [engine.tokenize(f"alpha {i} beta", special=False) + [eos] for i in (3, 5)]
    others_b = [engine.tokenize(f"gamma {i} delta", special=False) + [eos] for i in (3, 5)]
    assert [len(x) for x in others_a] == [len(x) for x in others_b]
    policy.exact_logprob = True
    try:
        with policy._run_lock:
            policy._eval_prompt(prompt)  # cached first, so both scorings decode the same batch shape
            with_a = policy._score(prompt, [mine] + others_a)[0][0]
            with_b = policy._score(prompt, [mine] + others_b)[0][0]
    finally:
        policy.exact_logprob = False
    assert with_a == with_b  # the same batch shape, other contents: bit-identical when masked


def test_background_loading_reports_status():
    policy = LlamaCppPolicy(str(default_model_path()))
    assert policy.status == "not loaded" and "untrained" in policy.describe()
    policy.start_loading()
    policy._thread.join(timeout=120)
    assert policy.status == "ready" and policy.load_seconds is not None
    policy.close()


def test_a_broken_model_falls_back_to_the_heuristic(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    policy = LlamaCppPolicy(str(bad))
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h100"))
    ranked = policy.rank(state, applicable(analysis, state.kernel, state.target))
    assert policy.status == "failed" and "failed to load" in policy.describe()
    assert ranked and "heuristic ranking" in ranked[0].metadata["fallback"] and ranked[0].logprob is None


def test_importing_the_policy_package_does_not_import_llama_cpp():
    code = (
        "import sys\n"
        "from mtmc_lsp.optimizer.policy import make_policy\n"
        "from mtmc_lsp.settings import Settings\n"
        "p = make_policy(Settings())\n"
        "assert p.status == 'not loaded', p.status\n"
        "assert 'llama_cpp' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_loading_warms_the_system_turn_every_prompt_starts_with(policy):
    policy.clear_cache()
    policy.warm_up()
    cached = [slot["tokens"] for slot in policy._slots if slot["tokens"]]
    analysis = analyze((ROOT / "mtmc_lsp" / "examples" / "softmax.py").read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h100"))
    prompt = policy._engine.tokenize(policy.prompt(state, []), special=True)
    assert len(cached) == 1 and 10 < len(cached[0]) < len(prompt) and prompt[:len(cached[0])] == cached[0]
