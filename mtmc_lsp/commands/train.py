"""``mtmc train``: collect measured episodes, build decisions, behaviour-clone, RL, export GGUF, evaluate.

The pipeline (docs/training.md): ``collect`` on the GPU (over the development corpus and its ``variants``) -> ``dataset`` (renders the policy's prompts
with llama.cpp) -> ``bc`` -> ``rl`` -> ``export`` (adapter GGUF marked trained) -> ``eval`` on held-out.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

DEV_CORPUS = "benchmarks/wild/dev"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="train_command", metavar="STAGE")

    p = sub.add_parser("collect", help="explore action sequences per kernel with real verification (resumable)")
    p.add_argument("files", nargs="*", help=f"Triton files (default: every file in {DEV_CORPUS})")
    p.add_argument("--out", default="runs/collect", help="run folder: episodes.jsonl, verify_cache.jsonl, run.json")
    p.add_argument("--target", default="h200", help="target GPU profile (default h200)")
    p.add_argument("--budget-s", type=float, default=3600.0, help="wall-clock budget of this invocation")
    p.add_argument("--kernel-budget-s", type=float, default=600.0, help="budget of one kernel's episode")
    p.add_argument("--seeds", type=int, default=1, help="episodes per kernel, each exploring with its own seed")
    p.add_argument("--steps", type=int, default=4, help="chain depth (kept steps) per episode")
    p.add_argument("--beam", type=int, default=3, help="states kept per depth")
    p.add_argument("--tries", type=int, default=6, help="verifications per state at most")
    p.add_argument("--jitter", type=float, default=0.05, help="Gumbel noise on the heuristic's scores")
    p.add_argument("--workers", type=int, default=1, help="episodes run at once (local backend)")
    p.add_argument("--verify-seeds", type=int, default=3, help="random seeds per correctness check")
    p.add_argument("--mode", default="auto", choices=("auto", "gpu", "interpreter"), help="verification mode")
    p.add_argument("--backend", default="local", choices=("local", "process", "ray"),
                   help="local: threads, one verifier pool; process: --processes pools on one GPU, timing alone; ray")
    p.add_argument("--processes", type=int, default=8, help="verifier pools side by side (process backend)")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: start a local one)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs used (for the per-GPU rate; Ray: one task per GPU)")
    p.add_argument("--order", type=int, default=0, help="0: units in file order; else shuffled under this seed")

    p = sub.add_parser("variants", help="synthetic variants of development files: other input shapes and half dtypes")
    p.add_argument("files", nargs="*", help=f"Triton files (default: every file in {DEV_CORPUS})")
    p.add_argument("--out", default="runs/variants", help="folder for the variant files")
    p.add_argument("--scale", type=float, action="append", help="factor for get_inputs's sizes (repeatable; default 0.25)")
    p.add_argument("--no-dtype-swap", action="store_true", help="no fp16 <-> bf16 input variants")

    p = sub.add_parser("dataset", help="turn collected episodes into decision records (gzip JSONL)")
    p.add_argument("runs", nargs="+", help="collect run folders, trajectory folders (.mtmc/trajectories) or episode "
                                          "JSONL files; merged, each episode once")
    p.add_argument("--out", default="data/policy/decisions.jsonl.gz")
    p.add_argument("--model", default="", help="the policy GGUF whose chat template and tokens to use (default: embedded)")

    p = sub.add_parser("bc", help="behaviour cloning: a LoRA on the best chains' decisions")
    p.add_argument("data", help="decisions file (from `mtmc train dataset`)")
    p.add_argument("--out", default="runs/bc", help="adapter folder (peft) with train_log.json")
    p.add_argument("--base", default="", help="base GGUF (default: the embedded SmolLM2)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--sft-weight", type=float, default=0.1)
    p.add_argument("--all-states", action="store_true", help="clone every state's best kept action, not only chains")
    p.add_argument("--device", default="auto", help="torch device (auto: cuda when there is one)")

    p = sub.add_parser("rl", help="reward-weighted regression over sibling actions with a KL anchor to BC")
    p.add_argument("data")
    p.add_argument("--adapter", required=True, help="the BC adapter folder")
    p.add_argument("--out", default="runs/rl")
    p.add_argument("--base", default="")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--temperature", type=float, default=0.1)
    p.add_argument("--kl-coef", type=float, default=0.1)
    p.add_argument("--device", default="auto")

    p = sub.add_parser("export", help="write a trained adapter folder as a llama.cpp LoRA GGUF marked trained")
    p.add_argument("adapter", help="peft adapter folder (from bc or rl)")
    p.add_argument("--out", required=True, help="the GGUF file to write")
    p.add_argument("--data", default="", help="the decisions file it was trained on (its provenance goes in)")
    p.add_argument("--base", default="", help="the base GGUF (default: embedded)")
    p.add_argument("--stage", default="", help="bc or rl (default: read from train_log.json)")

    p = sub.add_parser("eval", help="greedy K-step chains of policies vs the search's best, on held-out files")
    p.add_argument("files", nargs="*", help="Triton files (default: benchmarks/wild/heldout)")
    p.add_argument("--target", default="h200")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--policies", default="heuristic,random,base",
                   help="comma list: heuristic, random, base (untrained embedded), trained (needs --adapter)")
    p.add_argument("--adapter", default="", help="the trained adapter GGUF")
    p.add_argument("--mode", default="auto", choices=("auto", "gpu", "interpreter"))
    p.add_argument("--verify-seeds", type=int, default=3)
    p.add_argument("--kernel-budget-s", type=float, default=600.0)
    p.add_argument("--cache", default="", help="a verification cache (JSONL) to read and extend: measure once on a GPU, "
                                               "score llama.cpp policies later with --offline")
    p.add_argument("--offline", action="store_true",
                   help="verify nothing: steps missing from --cache count as not kept (and are counted)")
    p.add_argument("--no-search-best", action="store_true", help="skip the exploring search's reference chain")
    p.add_argument("--max-verifications", type=int, default=8,
                   help="verifications per kernel of each policy's greedy loop, falling back down its ranking; the "
                        "table reads budgets 1, 2, 4, 8 off the one run (0: one verification per state)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    stage = getattr(args, "train_command", None)
    if stage is None:
        print("mtmc train: name a stage: collect, dataset, bc, rl, export or eval", file=sys.stderr)
        return 2
    return {"collect": _collect, "variants": _variants, "dataset": _dataset, "bc": _bc, "rl": _rl, "export": _export, "eval": _eval}[stage](args)


def _files(given: list[str], default_folder: str) -> list[str]:
    return given or sorted(glob.glob(f"{default_folder}/*.py"))


def _collect(args) -> int:
    import functools

    from mtmc_lsp.optimizer.training.collect import (
        CollectSettings, LocalBackend, ProcessBackend, RayBackend, collect, default_verifier)

    files = _files(args.files, DEV_CORPUS)
    settings = CollectSettings(steps=args.steps, beam=args.beam, tries=args.tries, kernel_budget_s=args.kernel_budget_s,
                               jitter=args.jitter, options=f"seeds={args.verify_seeds}")
    backend = {"ray": lambda: RayBackend(args.ray_address, gpus_per_task=1.0),
               "process": lambda: ProcessBackend(args.processes),
               "local": lambda: LocalBackend(args.workers)}[args.backend]()

    def progress(result) -> None:
        note = f" ({result.error})" if result.error else ""
        print(f"{result.unit.file}:{result.unit.kernel} seed {result.unit.seed}: {result.verified} verified, "
              f"{result.cache_hits} cached, {result.seconds:.1f} s{note}", file=sys.stderr, flush=True)

    summary = collect(files, args.target, args.budget_s,
                      functools.partial(default_verifier, seeds=args.verify_seeds, mode=args.mode),
                      out=args.out, seeds=args.seeds, settings=settings, backend=backend, gpus=args.gpus,
                      on_result=progress, order=args.order)
    print(json.dumps(summary.to_json(), indent=1))
    return 0


def _variants(args) -> int:
    from mtmc_lsp.optimizer.training.variants import write_variants

    written = write_variants(_files(args.files, DEV_CORPUS), args.out, args.scale or (0.25,),
                             swap_half=not args.no_dtype_swap)
    print(json.dumps({"out": args.out, "variants": len(written)}, indent=1))
    return 0


def _dataset(args) -> int:
    from mtmc_lsp.optimizer.training.dataset import (DatasetSummary, PromptRenderer, build_decisions,
                                                     gather_episodes, provenance, write_decisions)

    episodes, runs = gather_episodes(args.runs)
    renderer = PromptRenderer(args.model or None)
    try:
        decisions = build_decisions(episodes, renderer)
    finally:
        renderer.close()
    summary = DatasetSummary.of(decisions)
    header = {"provenance": provenance(promptModel=renderer.model_name), "runs": runs, "episodes": len(episodes),
              "summary": summary.__dict__}
    write_decisions(args.out, decisions, header)
    print(json.dumps({"out": args.out, **summary.__dict__}, indent=1))
    return 0


def _device(name: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def _bc(args) -> int:
    from mtmc_lsp.optimizer.training.bc import BCConfig, chosen_probability, train_bc
    from mtmc_lsp.optimizer.training.dataset import read_decisions
    from mtmc_lsp.optimizer.training.scoring import load_base_model, with_lora

    _, decisions = read_decisions(args.data)
    model = with_lora(load_base_model(args.base or None).to(_device(args.device)), rank=args.rank)
    config = BCConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, sft_weight=args.sft_weight,
                      chains_only=not args.all_states)
    before = chosen_probability(model, decisions, config.chains_only)
    log = train_bc(model, decisions, config, out=args.out)
    after = chosen_probability(model, decisions, config.chains_only)
    print(json.dumps({"out": args.out, "examples": log.examples, "chosen_probability": [before, after],
                      "last": log.rows[-1], "seconds": log.seconds}, indent=1))
    return 0


def _rl(args) -> int:
    from mtmc_lsp.optimizer.training.dataset import read_decisions
    from mtmc_lsp.optimizer.training.rl import RLConfig, policy_quality, train_rl
    from mtmc_lsp.optimizer.training.scoring import load_base_model, load_lora

    _, decisions = read_decisions(args.data)
    model = load_lora(load_base_model(args.base or None).to(_device(args.device)), args.adapter, trainable=True)
    before = policy_quality(model, decisions)
    log = train_rl(model, decisions, RLConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                              temperature=args.temperature, kl_coef=args.kl_coef), out=args.out)
    after = policy_quality(model, decisions)
    print(json.dumps({"out": args.out, "states": log.examples, "before": before, "after": after,
                      "curve": f"{args.out}/train_log.json", "seconds": log.seconds}, indent=1))
    return 0


def _export(args) -> int:
    from mtmc_lsp.optimizer.policy.factory import default_model_path
    from mtmc_lsp.optimizer.training.dataset import read_decisions
    from mtmc_lsp.optimizer.training.export import read_mtmc_metadata, saved_lora_tensors, write_adapter_gguf

    folder = Path(args.adapter)
    log_file = folder / "train_log.json"
    log = json.loads(log_file.read_text()) if log_file.is_file() else {}
    header = read_decisions(args.data)[0] if args.data else {}
    base = Path(args.base) if args.base else default_model_path()
    stage = args.stage or log.get("stage", "bc")
    training = {"stage": stage, "config": log.get("config"), "examples": log.get("examples"),
                "last": (log.get("rows") or [None])[-1]}
    path = write_adapter_gguf(saved_lora_tensors(folder, base), args.out, stage,
                              {k: header.get(k) for k in ("provenance", "sha256", "decisions", "summary")},
                              training, base.name if base else "")
    print(json.dumps({"out": str(path), **read_mtmc_metadata(path)}, indent=1, default=str))
    return 0


def _eval(args) -> int:
    import functools

    from mtmc_lsp.optimizer.policy.factory import default_model_path
    from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy
    from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy
    from mtmc_lsp.optimizer.training.collect import ExplorationPolicy, ResultCache, default_verifier
    from mtmc_lsp.optimizer.training.evaluate import BUDGETS, evaluate, unmeasured_verifier

    makers = {
        "heuristic": lambda: HeuristicPolicy(),
        "random": lambda: ExplorationPolicy(None, seed=0),
        "base": lambda: LlamaCppPolicy(str(default_model_path())),
        "trained": lambda: LlamaCppPolicy(str(default_model_path()), adapter_path=args.adapter),
    }
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in makers] + (["trained (needs --adapter)"] if "trained" in names and not args.adapter else [])
    if unknown:
        print(f"mtmc train eval: unknown or incomplete policies: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.offline and not args.cache:
        print("mtmc train eval: --offline needs the --cache a GPU run measured", file=sys.stderr)
        return 2
    verifier = (unmeasured_verifier if args.offline
                else functools.partial(default_verifier, seeds=args.verify_seeds, mode=args.mode))
    report = evaluate(_files(args.files, "benchmarks/wild/heldout"), {n: makers[n]() for n in names}, args.target,
                      args.steps, verifier, kernel_budget_s=args.kernel_budget_s,
                      cache=ResultCache(args.cache) if args.cache else None, search_best=not args.no_search_best,
                      max_verifications=args.max_verifications or None,
                      on_chain=lambda c: print(f"{c.policy:12} {c.file}:{c.kernel}: {c.kept} kept, "
                                               f"log-speedup {c.log_speedup:+.3f}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
    else:
        for row in report.table():
            share = f"{row['share_of_search_best']:.2f}" if row["share_of_search_best"] is not None else "-"
            print(f"{row['policy']:12} kernels {row['kernels']:3}  geomean {row['geomean_speedup']:.3f}x  "
                  f"kept {row['mean_kept_steps']:.2f}  share of search-best {share}  "
                  f"unmeasured {row['unmeasured_attempts']}")
        for row in report.budget_table():
            at = "  ".join(f"@{b} {row[f'geomean_at_{b}']:.3f}x" for b in BUDGETS)
            needed = row["mean_verifications_to_90pct"]
            print(f"{row['policy']:12} {at}  90% of search-best: {row['reached_90pct']}/{row['kernels_with_speedup']} "
                  f"kernels, {'-' if needed is None else f'{needed:.1f}'} verifications")
    return 0
