"""The training pipeline on a CPU: collect (scripted verifier) -> decisions -> tiny BC and RL -> GGUF -> llama.cpp."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy.base import PolicyState, candidate_texts
from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy
from mtmc_lsp.optimizer.training.collect import (CACHE_FILE, EPISODES_FILE, ExplorationPolicy, LocalBackend,
                                                 ProcessBackend, RayBackend, CollectSettings, collect)
from mtmc_lsp.optimizer.training.dataset import (DECISION_SCHEMA, HeldOutError, build_decisions, provenance,
                                                 read_decisions, read_episodes_file, user_message_of, write_decisions)
from mtmc_lsp.optimizer.training.evaluate import SEARCH_BEST, evaluate
from mtmc_lsp.optimizer.verify.report import Reward, Speed, VerificationReport
from mtmc_lsp.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEV_FILE = ROOT / "benchmarks" / "wild" / "dev" / "mm_autotune.py"
HELDOUT = ROOT / "benchmarks" / "wild" / "heldout"
SMALL = CollectSettings(steps=2, beam=2, tries=3)


class ScriptedVerifier:
    """Deterministic verdicts from the new text's hash: 1 in 5 wrong, speed-ups 0.7x-2.3x; counts its calls."""

    calls = 0

    def __init__(self, path: str, target):
        self.target = target

    def __call__(self, new_text: str, old_text: str, cancel=None) -> VerificationReport:
        type(self).calls += 1
        h = int(hashlib.sha256(new_text.encode()).hexdigest()[:8], 16)
        correct = h % 5 != 0
        speedup = 0.7 + (h % 97) / 60
        speed = Speed("previous", 1.0, 1.0 / speedup, speedup, 0.02, 3, [speedup] * 3, True) if correct else None
        return VerificationReport(status="verified" if correct else "incorrect", mode="gpu", device="scripted",
                                  target=self.target.key, summary="scripted", compiled=True, correct=correct, seeds=1,
                                  compared_against=["previous"], checks=[], reward=Reward.of(True, correct, speed),
                                  speed=speed)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("collect")
    summary = collect([str(DEV_FILE)], "h200", 120, ScriptedVerifier, out=folder, settings=SMALL)
    assert summary.episodes == 1 and summary.verified >= 4 and not summary.errors
    return folder


@pytest.fixture(scope="module")
def renderer():
    pytest.importorskip("llama_cpp", reason="decisions are rendered with the embedded policy")
    from mtmc_lsp.optimizer.training.dataset import PromptRenderer

    r = PromptRenderer()
    yield r
    r.close()


@pytest.fixture(scope="module")
def decisions(run_folder, renderer):
    return build_decisions(read_episodes_file(run_folder / EPISODES_FILE), renderer)


def tiny_model(seed: int = 0):
    """A randomly initialised 2-layer Llama with the embedded model's vocabulary, LoRA on top."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from transformers import LlamaConfig, LlamaForCausalLM

    from mtmc_lsp.optimizer.training.scoring import with_lora

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return with_lora(LlamaForCausalLM(config), rank=4, seed=seed)


# -- collection ----------------------------------------------------------------------------------------
def test_collect_records_offers_resumes_and_caches_by_source(run_folder):
    records = [json.loads(line) for line in (run_folder / EPISODES_FILE).read_text().splitlines()]
    assert [r["type"] for r in records][0] == "begin" and records[-1]["type"] == "end"
    steps = [r for r in records if r["type"] == "step"]
    # Every step carries what its state offered, and the user message the policy read there.
    assert all(s["offered"] and s["candidate"] in s["offered"] for s in steps)
    assert all(user_message_of(s["state"]) == s["user"] for s in steps)
    run_json = json.loads((run_folder / "run.json").read_text())
    assert run_json["provenance"]["libraries"]["torch"] and run_json["settings"]["beam"] == 2

    # Resuming skips the finished episode and verifies nothing.
    before = ScriptedVerifier.calls
    again = collect([str(DEV_FILE)], "h200", 120, ScriptedVerifier, out=run_folder, settings=SMALL)
    assert (again.skipped, again.episodes, ScriptedVerifier.calls) == (1, 0, before)
    # Another seed explores again; the states it shares with the first are answered from the cache.
    cached = len((run_folder / CACHE_FILE).read_text().splitlines())
    second = collect([str(DEV_FILE)], "h200", 120, ScriptedVerifier, out=run_folder, seeds=2, settings=SMALL)
    assert second.episodes == 1 and second.cache_hits > 0
    assert ScriptedVerifier.calls - before == len((run_folder / CACHE_FILE).read_text().splitlines()) - cached


class SlowVerifier(ScriptedVerifier):
    """The scripted verdicts, 0.6 s each: a short budget stops an episode in the middle."""

    def __call__(self, new_text: str, old_text: str, cancel=None) -> VerificationReport:
        import time

        time.sleep(0.6)
        return super().__call__(new_text, old_text, cancel)


def test_an_episode_cut_by_the_budget_runs_again_from_the_cache(tmp_path):
    # 3 s: on a loaded 2-core machine the episode's set-up took over a second of a 1 s budget, and nothing was verified.
    cut = collect([str(DEV_FILE)], "h200", 3.0, SlowVerifier, out=tmp_path, settings=SMALL)
    ends = [json.loads(line) for line in (tmp_path / EPISODES_FILE).read_text().splitlines()]
    assert cut.episodes == 1 and [r["stopped"] for r in ends if r["type"] == "end"] == ["budget"]
    full = collect([str(DEV_FILE)], "h200", 120, SlowVerifier, out=tmp_path, settings=SMALL)
    assert full.skipped == 0 and full.episodes == 1 and full.cache_hits >= 1
    episodes = read_episodes_file(tmp_path / EPISODES_FILE)
    assert len(episodes) == 2
    kept = build_decisions(episodes)
    assert {d.episode for d in kept} == {episodes[1][0]["episode"]}  # only the last run of the unit


def test_heldout_files_never_become_training_data(tmp_path):
    heldout = sorted(HELDOUT.glob("*.py"))[0]
    with pytest.raises(HeldOutError):
        collect([str(heldout)], "h200", 10, ScriptedVerifier, out=tmp_path)


def test_exploration_breaks_ties_by_seed_and_random_covers_every_candidate():
    analysis = analyze(DEV_FILE.read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h200"))
    candidates = applicable(analysis, state.kernel, state.target)
    orders = {tuple(r.candidate.key() for r in ExplorationPolicy(HeuristicPolicy(), seed=s).rank(state, candidates))
              for s in range(6)}
    assert len(orders) > 1
    uniform = ExplorationPolicy(None, seed=1).rank(state, candidates)
    assert sorted(r.candidate.key() for r in uniform) == sorted(c.key() for c in candidates)


@pytest.mark.skipif(__import__("importlib").util.find_spec("ray") is not None, reason="ray is installed")
def test_the_ray_backend_says_it_needs_ray(tmp_path):
    with pytest.raises(ModuleNotFoundError):
        collect([str(DEV_FILE)], "h200", 30, ScriptedVerifier, out=tmp_path, settings=SMALL,
                backend=RayBackend(gpus_per_task=0))


@pytest.mark.slow
def test_the_ray_backend_collects_on_a_local_cluster(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray backend needs ray (not in the dev extra)")
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the scripted verifier travels by value
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        summary = collect([str(DEV_FILE)], "h200", 120, ScriptedVerifier, out=tmp_path, settings=SMALL,
                          backend=RayBackend(gpus_per_task=0))
    finally:
        ray.shutdown()
    local = collect([str(DEV_FILE)], "h200", 120, ScriptedVerifier, out=tmp_path / "local", settings=SMALL,
                    backend=LocalBackend())
    assert summary.episodes == 1 and summary.verified == local.verified


def test_the_process_backend_collects_what_the_local_one_does(tmp_path):
    """Child processes (one verifier pool each) give the same episodes, and the driver writes the files."""
    files = [str(DEV_FILE), str(ROOT / "benchmarks" / "wild" / "dev" / "ew_geglu_kernelbench.py")]
    local = collect(files, "h200", 120, ScriptedVerifier, out=tmp_path / "local", settings=SMALL, backend=LocalBackend())
    spread = collect(files, "h200", 120, ScriptedVerifier, out=tmp_path / "spread", settings=SMALL,
                     backend=ProcessBackend(2))
    assert not spread.errors and (spread.episodes, spread.verified) == (local.episodes, local.verified) and spread.episodes >= 2

    def steps(folder):
        records = [json.loads(line) for line in (folder / EPISODES_FILE).read_text().splitlines()]
        return sorted((r["candidate"]["action"], r["status"]) for r in records if r["type"] == "step")

    assert steps(tmp_path / "spread") == steps(tmp_path / "local")
    cached = (tmp_path / "spread" / CACHE_FILE).read_text().splitlines()
    assert len(cached) == spread.verified  # every child's verification reached the driver's cache
    again = collect(files, "h200", 120, ScriptedVerifier, out=tmp_path / "spread", settings=SMALL,
                    backend=ProcessBackend(2))
    assert (again.skipped, again.episodes) == (spread.episodes, 0)


def test_episodes_on_evaluation_data_are_kept_out_of_training(run_folder):
    from mtmc_lsp.optimizer.training.dataset import decisions_from_episode

    episode = read_episodes_file(run_folder / EPISODES_FILE)[0]
    assert build_decisions([episode])

    def marked(**begin):
        return [{**r, **begin} if r["type"] == "begin" else r for r in episode]

    for other in (marked(evaluation=True), marked(file="benchmarks/wild/heldout/x.py")):
        assert build_decisions([other]) == [] and build_decisions([other, episode])
        with pytest.raises(HeldOutError):
            decisions_from_episode(other)


def test_the_dataset_merges_many_runs_each_episode_once(run_folder, tmp_path):
    """A resumed window's copy of another's episodes, a trajectories folder and a plain file: one episode each."""
    from mtmc_lsp.optimizer.training.dataset import gather_episodes

    episodes = read_episodes_file(run_folder / EPISODES_FILE)
    resumed = tmp_path / "window2"
    resumed.mkdir()
    (resumed / EPISODES_FILE).write_text((run_folder / EPISODES_FILE).read_text())  # what --previous copies
    trajectories = tmp_path / ".mtmc" / "trajectories"
    trajectories.mkdir(parents=True)
    evaluation = [{**r, "episode": "eval-1", **({"evaluation": True} if r["type"] == "begin" else {})}
                  for r in episodes[0]]
    (trajectories / "eval-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evaluation))
    merged, runs = gather_episodes([run_folder, resumed, trajectories])
    assert len(merged) == len(episodes) + 1
    assert [r["episodes"] for r in runs] == [len(episodes), 0, 1] and runs[2]["evaluationEpisodes"] == 1
    assert runs[0]["settings"]["beam"] == 2  # the collect run's run.json travels with its episodes
    assert len(build_decisions(merged)) == len(build_decisions(episodes))  # the evaluation episode trains nothing


# -- decisions -----------------------------------------------------------------------------------------
def test_decisions_use_the_policys_own_prompt_texts_and_tokens(decisions, renderer):
    assert decisions and any(d.chain and d.chosen for d in decisions)
    first = next(d for d in decisions if d.depth == 1)
    analysis = analyze(DEV_FILE.read_text(), str(DEV_FILE))
    state = PolicyState(analysis, analysis.kernel(first.kernel), get_profile("h200"))
    texts = candidate_texts(applicable(analysis, first.kernel, state.target))
    assert [o.text for o in first.offered] == texts
    policy = renderer.policy
    engine = policy.load()
    assert first.prompt == policy.prompt(state, texts)  # the live state's prompt, as rank() builds it
    assert first.prompt_ids == engine.tokenize(first.prompt, special=True)
    assert first.offered[0].ids == engine.tokenize(texts[0], special=False) + [engine.model.token_eos()]
    for d in decisions:
        assert {s.text for s in d.siblings} <= {o.text for o in d.offered}
        if d.chosen is not None:
            assert max(s.reward for s in d.siblings if s.status == "kept") >= 0.4 or d.chain


def test_decision_files_round_trip_with_provenance_and_checksum(decisions, tmp_path):
    path = write_decisions(tmp_path / "d.jsonl.gz", decisions, {"provenance": provenance(corpus=["benchmarks/wild/dev"])})
    header, back = read_decisions(path)
    assert back == decisions and header["schema"] == DECISION_SCHEMA and header["decisions"] == len(decisions)
    for key in ("gpu", "driver", "libraries", "date", "corpus"):
        assert key in header["provenance"]
    lines = gzip.open(path, "rt").read().splitlines()
    tampered = tmp_path / "t.jsonl.gz"
    with gzip.open(tampered, "wt") as fh:
        last = json.loads(lines[-1])
        last["depth"] += 1  # every decision has a depth; a status such as "kept" may be absent from the last one
        fh.write("\n".join(lines[:-1] + [json.dumps(last, sort_keys=True)]) + "\n")
    with pytest.raises(ValueError, match="checksum"):
        read_decisions(tampered)
    heldout = back[0].__class__(**{**back[0].__dict__, "file": "benchmarks/wild/heldout/x.py"})
    with pytest.raises(HeldOutError):
        write_decisions(tmp_path / "h.jsonl.gz", [heldout], {})


# -- scoring, BC, RL ---------------------------------------------------------------------------------------
def test_the_torch_score_is_the_policys_grammar_probability(decisions):
    import torch

    from mtmc_lsp.optimizer.training.scoring import branch_plans, decision_plans, sequence_logprobs

    plans = branch_plans([[1, 2, 3], [1, 2, 4], [1, 5]])
    assert [p.branches for p in plans] == [[(1, 2, [2, 5]), (2, 3, [3, 4])], [(1, 2, [2, 5]), (2, 4, [3, 4])],
                                           [(1, 5, [2, 5])]]
    model = tiny_model()
    with torch.no_grad():
        for d in decisions[:3]:
            constrained, raw = sequence_logprobs(model, d.prompt_ids, decision_plans(d), sft=True)
            assert float(constrained.exp().sum()) == pytest.approx(1.0, abs=1e-5)  # a distribution over the offers
            assert bool((raw <= constrained).all())
            # The same numbers from the full logits (the gathered head must not change them).
            full = model(input_ids=torch.tensor([d.prompt_ids + d.offered[0].ids])).logits[0]
            n, plan = len(d.prompt_ids), decision_plans(d)[0]
            expected = sum(float(full[n - 1 + i, t] - torch.logsumexp(full[n - 1 + i, a], 0)) for i, t, a in plan.branches)
            assert float(constrained[0]) == pytest.approx(expected, abs=1e-4)


def test_bc_then_rl_run_end_to_end_on_a_tiny_model(decisions, tmp_path):
    from mtmc_lsp.optimizer.training.bc import BCConfig, chosen_probability, train_bc
    from mtmc_lsp.optimizer.training.rl import RLConfig, policy_quality, train_rl
    from mtmc_lsp.optimizer.training.scoring import load_lora

    model = tiny_model()
    before = chosen_probability(model, decisions)
    # Full batches (every state each step): the chosen actions' probability must rise.
    log = train_bc(model, decisions, BCConfig(steps=3, batch_size=256, lr=1e-2, sft_weight=0.1), out=tmp_path / "bc")
    assert len(log.rows) == 3 and chosen_probability(model, decisions) > before
    assert (tmp_path / "bc" / "adapter_model.safetensors").is_file()
    assert json.loads((tmp_path / "bc" / "train_log.json").read_text())["stage"] == "bc"

    # RL starts from the saved BC adapter, as `mtmc train rl --adapter` does.
    base = tiny_model().get_base_model()
    rl_model = load_lora(base, tmp_path / "bc", trainable=True)
    assert chosen_probability(rl_model, decisions) == pytest.approx(chosen_probability(model, decisions), abs=1e-6)
    start = policy_quality(rl_model, decisions)
    # Full batches: every step sees every state, so the measured reward of the policy's choice must rise
    # (a batch of 8 states out of more let the others drift, which failed once the actions offered changed).
    curve = train_rl(rl_model, decisions, RLConfig(steps=3, batch_size=256, lr=1e-2, kl_coef=0.05), out=tmp_path / "rl")
    assert [row["step"] for row in curve.rows] == [1, 2, 3]
    assert curve.rows[0]["kl"] == pytest.approx(0.0, abs=1e-6) and curve.rows[-1]["kl"] > 0
    assert policy_quality(rl_model, decisions)["expected_reward"] > start["expected_reward"]


# -- export ----------------------------------------------------------------------------------------------
def test_the_q_k_permutation_is_the_inverse_of_transformers_gguf_reader():
    np = pytest.importorskip("numpy")
    gguf_utils = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    from mtmc_lsp.optimizer.training.export import permute_rows

    # transformers un-permutes attn_q/attn_k when it reads a GGUF; the export must permute back.
    reader = gguf_utils.LlamaTensorProcessor()
    for heads, kv in ((9, 9), (9, 3)):
        rows = np.random.default_rng(0).standard_normal((kv * 64, 4)).astype(np.float32)
        permuted = permute_rows(rows, heads, kv)
        assert not np.array_equal(permuted, rows)
        assert np.array_equal(reader._reverse_permute_weights(permuted, heads, kv), rows)


@pytest.mark.slow
def test_an_exported_adapter_loads_on_the_embedded_model_and_marks_it_trained(decisions, tmp_path):
    pytest.importorskip("llama_cpp")
    torch = pytest.importorskip("torch")
    from transformers import LlamaForCausalLM

    from mtmc_lsp.optimizer.policy.factory import default_model_path
    from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy
    from mtmc_lsp.optimizer.training.bc import BCConfig, train_bc
    from mtmc_lsp.optimizer.training.export import (export_adapter, lora_tensors, read_mtmc_metadata,
                                                    saved_lora_tensors)
    from mtmc_lsp.optimizer.training.scoring import config_from_gguf, with_lora

    torch.set_num_threads(1)
    torch.manual_seed(0)
    # The embedded model's shapes with one layer: the adapter covers block 0 only, which llama.cpp accepts.
    model = with_lora(LlamaForCausalLM(config_from_gguf(num_hidden_layers=1)), rank=4)
    train_bc(model, decisions, BCConfig(steps=1, batch_size=2, lr=5e-2), out=tmp_path / "bc")
    data = write_decisions(tmp_path / "d.jsonl.gz", decisions, {"provenance": provenance(corpus=["benchmarks/wild/dev"])})
    path = tmp_path / "policy-lora.gguf"
    assert main(["train", "export", str(tmp_path / "bc"), "--out", str(path), "--data", str(data)]) == 0
    meta = read_mtmc_metadata(path)
    assert meta["mtmc.policy.trained"] is True and meta["mtmc.training.stage"] == "bc"
    assert meta["mtmc.decision.schema"] == DECISION_SCHEMA
    assert json.loads(meta["mtmc.training.provenance"])["provenance"]["corpus"] == ["benchmarks/wild/dev"]
    api = export_adapter(model, tmp_path / "api.gguf", "bc", {"corpus": "dev"}, {"steps": 1}, "SmolLM2")
    assert read_mtmc_metadata(api)["mtmc.base_model"] == "SmolLM2"
    tensors, alpha, rank = lora_tensors(model)
    saved, saved_alpha, saved_rank = saved_lora_tensors(tmp_path / "bc")
    assert (alpha, rank) == (saved_alpha, saved_rank) and sorted(tensors) == sorted(saved)
    assert "blk.0.attn_q.weight.lora_b" in tensors and tensors["blk.0.attn_q.weight.lora_b"].shape == (576, 4)

    analysis = analyze(DEV_FILE.read_text())
    state = PolicyState(analysis, analysis.kernels[0], get_profile("h200"))
    candidates = applicable(analysis, state.kernel, state.target)
    trained = LlamaCppPolicy(str(default_model_path()), adapter_path=str(path), n_threads=1)
    base = LlamaCppPolicy(str(default_model_path()), n_threads=1)
    try:
        with_adapter = {r.candidate.key(): r.score for r in trained.rank(state, candidates)}
        without = {r.candidate.key(): r.score for r in base.rank(state, candidates)}
        assert trained.status == "ready" and trained.trained and "untrained" not in trained.describe()
        assert "LoRA policy-lora.gguf" in trained.describe() and not base.trained
    finally:
        trained.close()
        base.close()
    assert sum(with_adapter.values()) == pytest.approx(1.0, abs=1e-6)
    assert max(abs(with_adapter[k] - without[k]) for k in without) > 1e-4


@pytest.mark.slow
def test_a_lora_trained_in_transformers_scores_the_same_in_llama_cpp(decisions, tmp_path):
    """The whole chain: the base read from its GGUF by transformers, a q/k LoRA, export, llama.cpp ranking."""
    pytest.importorskip("llama_cpp")
    torch = pytest.importorskip("torch")
    from mtmc_lsp.optimizer.policy.factory import default_model_path
    from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy
    from mtmc_lsp.optimizer.training.export import export_adapter
    from mtmc_lsp.optimizer.training.scoring import decision_plans, load_base_model, sequence_logprobs, with_lora

    torch.set_num_threads(1)
    torch.manual_seed(0)
    decision = next(d for d in decisions if d.depth == 1)
    # q and k only: their rows are the ones the export must permute (a missing permutation moves
    # probabilities by ~0.014 here; a correct one agrees within the F16/F32 rounding, ~0.001).
    model = with_lora(load_base_model(), rank=4, target_modules=("q_proj", "k_proj"))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.05)
        with model.disable_adapter():
            base_hf = sequence_logprobs(model, decision.prompt_ids, decision_plans(decision))[0].exp().tolist()
        lora_hf = sequence_logprobs(model, decision.prompt_ids, decision_plans(decision))[0].exp().tolist()
    path = export_adapter(model, tmp_path / "qk.gguf", "bc")
    analysis = analyze(DEV_FILE.read_text(), str(DEV_FILE))
    state = PolicyState(analysis, analysis.kernel(decision.kernel), get_profile("h200"))
    candidates = applicable(analysis, decision.kernel, state.target)
    policy = LlamaCppPolicy(str(default_model_path()), adapter_path=str(path), n_threads=1)
    try:
        scored = {r.metadata["text"]: r.score for r in policy.rank(state, candidates)}
    finally:
        policy.close()
    llama = [scored[o.text] for o in decision.offered]
    assert max(abs(a - b) for a, b in zip(lora_hf, base_hf)) > 0.01  # the adapter matters
    assert max(abs(a - b) for a, b in zip(llama, lora_hf)) < 0.004


# -- evaluation ------------------------------------------------------------------------------------------
def test_eval_compares_greedy_policies_with_the_search_best():
    report = evaluate([str(DEV_FILE)], {"heuristic": HeuristicPolicy(), "random": ExplorationPolicy(None, seed=3)},
                      "h200", steps=2, verifier=ScriptedVerifier, search_beam=2, search_tries=3)
    table = {row["policy"]: row for row in report.table()}
    assert set(table) == {"heuristic", "random", SEARCH_BEST}
    best = {c.kernel: c.log_speedup for c in report.chains if c.policy == SEARCH_BEST}
    assert all(c.attempts <= 2 for c in report.chains if c.policy != SEARCH_BEST)  # greedy: one try per state
    assert all(math.isfinite(c.log_speedup) for c in report.chains) and best


def test_eval_reads_every_verification_budget_off_one_greedy_run():
    """With a cap of 8 the loop falls back down the ranking; budget B is the first B verifications of that run."""
    capped = evaluate([str(DEV_FILE)], {"heuristic": HeuristicPolicy(), "random": ExplorationPolicy(None, seed=3)},
                      "h200", steps=3, verifier=ScriptedVerifier, search_beam=2, search_tries=3, max_verifications=8)
    assert all(c.verifications <= 8 for c in capped.chains if c.policy != SEARCH_BEST)
    rows = {row["policy"]: row for row in capped.budget_table()}
    assert set(rows) == {"heuristic", "random"}
    for row in rows.values():  # more verifications never leave a chain slower
        at = [row[f"geomean_at_{b}"] for b in (1, 2, 4, 8)]
        assert at == sorted(at) and all(a >= 1.0 for a in at)
    for chain in capped.chains:
        if chain.policy == SEARCH_BEST:
            continue
        assert chain.log_speedup_within(8) == pytest.approx(chain.log_speedup)
        spent = [t[0] for t in chain.trace]
        assert spent == sorted(spent) and (not spent or spent[-1] <= chain.verifications)
    # A run capped at 1 is the first verification of the run capped at 8: the cap only stops the loop.
    single = evaluate([str(DEV_FILE)], {"heuristic": HeuristicPolicy()}, "h200", steps=3,
                      verifier=ScriptedVerifier, search_best=False, max_verifications=1)
    first = {c.kernel: c.log_speedup for c in single.chains}
    assert first == {c.kernel: c.log_speedup_within(1) for c in capped.chains if c.policy == "heuristic"}


def test_offline_eval_scores_policies_against_the_measured_cache_and_counts_misses(tmp_path):
    from mtmc_lsp.optimizer.training.collect import ResultCache
    from mtmc_lsp.optimizer.training.evaluate import unmeasured_verifier

    cache_file = tmp_path / "eval_cache.jsonl"
    online = evaluate([str(DEV_FILE)], {"heuristic": HeuristicPolicy()}, "h200", steps=2, verifier=ScriptedVerifier,
                      search_beam=2, search_tries=3, cache=ResultCache(cache_file))
    calls = ScriptedVerifier.calls
    offline = evaluate([str(DEV_FILE)], {"heuristic": HeuristicPolicy(), "random": ExplorationPolicy(None, seed=11)},
                       "h200", steps=2, verifier=unmeasured_verifier, search_beam=2, search_tries=3,
                       cache=ResultCache(cache_file))
    assert ScriptedVerifier.calls == calls  # nothing verified offline
    measured = {(c.policy, c.kernel): c for c in online.chains}
    replayed = {(c.policy, c.kernel): c for c in offline.chains}
    for key in measured:  # the measured chains replay exactly from the cache
        assert (replayed[key].log_speedup, replayed[key].actions, replayed[key].unmeasured) == \
            (measured[key].log_speedup, measured[key].actions, 0)
    table = {row["policy"]: row for row in offline.table()}
    # seed 11's first choice is an action the measured runs never tried: a miss, counted, not kept
    assert table["random"]["unmeasured_attempts"] >= 1 and table["random"]["mean_kept_steps"] == 0
    assert all(c.unmeasured <= c.attempts for c in offline.chains)


VARIANT_SOURCE = '''
import torch
import triton
import triton.language as tl

batch_size = 16
dim = 4096


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def get_inputs(device: str = "cuda", n: int = 1 << 20, rows: int = dim, heads: int = 8):
    x = torch.randn(n, device=device, dtype=torch.float16)
    return [x.to(torch.float16)]


def reference(x):
    return (x * 2.0).to(torch.float16)
'''


def test_variants_change_only_the_harness_sizes_and_half_dtype(tmp_path):
    from mtmc_lsp.optimizer.training.variants import scale_inputs, swap_half_dtype

    scaled = scale_inputs(VARIANT_SOURCE, 0.25)
    assert "n: int = 262144" in scaled and "dim = 1024" in scaled  # a literal and the module size it names
    assert "heads: int = 8" in scaled and "batch_size = 16" in scaled  # small counts and unused sizes stay
    assert scaled.split("def get_inputs")[0].replace("dim = 1024", "dim = 4096") == VARIANT_SOURCE.split("def get_inputs")[0]
    swapped = swap_half_dtype(VARIANT_SOURCE)
    inputs, rest = swapped.split("def get_inputs")[1].split("def reference")
    assert inputs.count("torch.bfloat16") == 2 and "float16" not in inputs.replace("bfloat16", "")
    assert "(x * 2.0).to(torch.float16)" in rest  # the reference keeps its own dtype
    assert swap_half_dtype(VARIANT_SOURCE.replace("dtype=torch.float16", "").replace(".to(torch.float16)", "")) is None
    kernels = {k.name for k in analyze(VARIANT_SOURCE).kernels}
    assert {k.name for k in analyze(scaled).kernels} == kernels == {k.name for k in analyze(swapped).kernels}


def test_variants_of_heldout_files_are_refused_and_the_cli_writes_dev_variants(tmp_path):
    from mtmc_lsp.optimizer.training.variants import variants_of

    heldout = tmp_path / "heldout" / "k.py"
    heldout.parent.mkdir()
    heldout.write_text(VARIANT_SOURCE)
    with pytest.raises(HeldOutError):
        variants_of(heldout)
    dev = tmp_path / "dev" / "k.py"
    dev.parent.mkdir()
    dev.write_text(VARIANT_SOURCE)
    assert main(["train", "variants", str(dev), "--out", str(tmp_path / "variants")]) == 0
    written = sorted(p.name for p in (tmp_path / "variants").iterdir())
    assert written == ["k__dtype_swap.py", "k__shape_x0.25.py"]
    assert (tmp_path / "variants" / "k__shape_x0.25.py").read_text().startswith("# Synthetic variant (shape_x0.25) of ")


def test_every_dev_variant_keeps_its_kernels_unchanged():
    from mtmc_lsp.optimizer.training.variants import variants_of

    count = 0
    for path in sorted((ROOT / "benchmarks" / "wild" / "dev").glob("*.py")):
        original = path.read_text()
        kernels = {k.name: original[k.span.start_offset:k.span.end_offset] for k in analyze(original).kernels}
        for variant in variants_of(path):
            count += 1
            changed = analyze(variant.text)
            assert {k.name: variant.text[k.span.start_offset:k.span.end_offset] for k in changed.kernels} == kernels, \
                f"{path.name} {variant.tag}"
    assert count >= 50  # 56 on 2026-12-01: most dev files have a harness with sizes or half inputs
