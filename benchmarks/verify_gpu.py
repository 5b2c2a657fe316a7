"""The verifier on a real GPU: planted faults must be caught, unchanged kernels must time as 1.0x.

Run from the repo root: ``python3 benchmarks/verify_gpu.py --out DIR``. Writes ``verify_gpu.json``
and prints a table. Everything goes through ``verify_file`` and a GPU ``WorkerPool`` exactly as the
language server uses them; this script never imports a user file itself.

Scenarios:
- every kernel in tests/corpus/faults/ against base.py (the correct version), at a realistic size:
  wrong element, partial write, pointer and id() caches, input mutation, compile error, hang,
  segfault, os._exit, illegal memory access, out of memory. After each fault that kills the
  worker, base.py is verified again to show the pool recovered;
- the bundled examples (matmul, softmax, gelu_bias) verified against themselves at the sizes of
  benchmarks/results/h200_probe.json: the speedup must be 1.0x within its own noise band;
- two real improvements (bigger blocks) to show a speedup outside the band;
- a >10x "speedup" (the old version sleeps on the host) to exercise the recheck;
- steps: optimization steps as ``mtmc optimize`` makes them (the heuristic policy's top candidates
  applied to the examples, the kernel corpus and the wild dev corpus), each verified twice, with the
  legacy settings (fixed 25/100 ms do_bench, nothing kept between jobs) and the current ones, each
  in its own worker with its own Triton cache: per-step time p50/p95 and where it goes (phases);
- test-style files (the wild dev corpus's ``test_*`` files): unchanged (1.0x within noise) and with
  the policy's top candidates applied, timed by replaying the launches recorded in each test;
- autograd (a test calling .backward()) and autotune (every config) on the GPU;
- the wild dev corpus verified against itself: every file must verify;
- containment (issue 33): the planted attacks of tests/corpus/containment_attacks.py, built with this
  run's process ids and paths (the checker's key read from /proc and signed verdicts forged into its pipes,
  the checker stopped and killed, the server stopped, a setsid daemon, files written outside the scratch
  folder, a connection to the host's loopback): each must be reported incorrect with nothing escaped, as
  the host sees it.

One command, under 10 minutes on an H200: ``python benchmarks/verify_gpu.py --out $OUT/verify``;
``--budget-s`` skips what would not fit (said in the JSON), results are written after every section, and
``verify_gpu.md`` summarises them. The security run alone (every planted fault and attack, old and new):
``python3 benchmarks/verify_gpu.py --out $OUT/attacks --only faults --only containment``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _bootstrap  # noqa: F401

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "tests" / "corpus" / "faults"
EXAMPLES = ROOT / "mtmc_lsp" / "examples"
KERNELS = ROOT / "tests" / "corpus" / "kernels"
sys.path.insert(0, str(ROOT / "tests"))
from corpus.containment_attacks import ATTACKS, StopWatch, aim, attack_text, escapes, reports  # noqa: E402
from corpus.kernels import kernel_files  # noqa: E402  (each corpus kernel, wherever it lives)

WILD_DEV = ROOT / "benchmarks" / "wild" / "dev"
# The verifier before this change: fixed do_bench windows, nothing kept between jobs.
LEGACY = dict(adaptive_timing=False, reuse_results=False, parallel_compile=False)
AUTOGRAD_TEST = ROOT / "tests" / "corpus" / "styles" / "autograd_double.py"  # sizes by device

FAULT_N = (1 << 22) + 7  # not a multiple of any block size: the partial-write tail is 7 elements
# fault -> (expected status, what must be named in the report)
FAULT_EXPECTATIONS = {
    "wrong_element": ("incorrect", "index [37]"),
    "partial_write": ("incorrect", "nan"),
    "pointer_cache": ("incorrect", "same input storage"),
    "id_cache": ("incorrect", "same input storage"),
    "mutate_input": ("incorrect", "changed its input"),
    "compile_error": ("compile_error", "undefined_bias"),
    "hang": ("timeout", "timed out"),
    "crash_segfault": ("crash", "SIGSEGV"),
    "crash_exit": ("crash", "code 7"),
    "illegal_memory": ("crash", "illegal memory access"),
    "out_of_memory": ("crash", "out of memory"),
    # Attacks on the checker (caught as wrong results) and misbehaviour a correct result survives.
    "gc_reference": ("incorrect", "incorrect"),
    "frame_peek": ("incorrect", "incorrect"),
    "patch_allclose": ("incorrect", "incorrect"),
    "patch_tensor_ops": ("incorrect", "replaced torch"),
    "lower_precision": ("incorrect", "incorrect"),
    "imported_empty": ("incorrect", "incorrect"),
    # Attacks that only a separate checker process stops (the candidate patches or forges in its own).
    "patch_checker_module": ("incorrect", "from the reference"),
    "sealed_kept": ("incorrect", "incorrect"),
    "forge_verdict": ("incorrect", "never reached the checker"),
    "side_stream": ("verified", "verified"),
    "print_flood": ("verified", "verified"),
    "memory_leak": ("verified", "verified"),
    "fork_child": ("verified", "verified"),
}
EXAMPLE_SIZES = {
    "matmul": {"size": 4096},
    "softmax": {"rows": 32768, "cols": 4096},
    "gelu_bias": {"n": 1 << 26},
}
# (example, description, replacements) -> a genuinely faster version of the naive example.
IMPROVEMENTS = [
    ("gelu_bias", "BLOCK_SIZE 128 -> 1024", [("BLOCK_SIZE = 128", "BLOCK_SIZE = 1024")]),
    ("matmul", "32x32x32 tiles -> 128x128x64, 3 stages, 8 warps",
     [("BLOCK_M = 32", "BLOCK_M = 128"), ("BLOCK_N = 32", "BLOCK_N = 128"), ("BLOCK_K = 32", "BLOCK_K = 64"),
      ("num_warps=4, num_stages=1", "num_warps=8, num_stages=3")]),
]


def run_one(pool: WorkerPool, name: str, new_text: str, old_text: str | None, options: VerifyOptions,
            keep_report: bool = True) -> dict:
    started = time.monotonic()
    report = verify_file(new_text, old_text, f"{name}.py", "h200", options)
    wall = time.monotonic() - started
    data = report.to_json()
    row = {"name": name, "status": report.status, "summary": report.summary, "wall_s": round(wall, 2),
           "error_line": report.error_line, "device": report.device, "reward": data["reward"],
           "phases": report.phases}
    if report.speed is not None:
        s = report.speed
        row.update(speedup=s.speedup, band=s.band, within_noise=s.within_noise, baseline_ms=s.baseline_ms,
                   candidate_ms=s.candidate_ms, ratios=s.ratios, roofline_pct=s.roofline_pct, believed=s.believed,
                   recheck=s.recheck, speedup_vs_reference=s.speedup_vs_reference, method=s.method, sizing=s.sizing)
    row["report"] = data if keep_report else {"checks": data["checks"], "environment": data["environment"]}
    return row


def policy_steps(path: Path, per_kernel: int, target: str = "h200") -> list[tuple[str, str, str]]:
    """(label, new text, old text): the heuristic policy's top candidates for each kernel, applied once."""
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.policy.base import PolicyState
    from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy

    text = path.read_text()
    profile = get_profile(target)
    analysis = analyze(text, str(path))
    policy = HeuristicPolicy()
    steps = []
    for kernel in analysis.kernels:
        offered = applicable(analysis, kernel, profile)
        if not offered:
            continue
        ranked = policy.rank(PolicyState(analysis, kernel, profile), offered)
        for choice in ranked[:per_kernel]:
            try:
                edit = apply_candidate(text, choice.candidate, profile)
            except Exception:  # noqa: BLE001 - an action that refuses this file is not a step
                continue
            steps.append((f"{path.stem}: {choice.candidate.action} {kernel.name}", edit.new_text, text))
    return steps


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def gpu_pool(cache_dir: str, dry: bool) -> WorkerPool:
    """A pool whose worker compiles into its own Triton cache (set when the worker starts)."""
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    pool = WorkerPool("interpreter" if dry else "gpu")
    return pool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="verify-gpu-out")
    parser.add_argument("--only", action="append", default=[], help="run only these scenario names")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="check this script without a GPU: interpreter, tiny sizes, no GPU-only faults")
    parser.add_argument("--budget-s", type=float, default=540,
                        help="skip the sections that would start after this many seconds (the device allows 600)")
    parser.add_argument("--steps", type=int, default=14, help="optimization steps timed before/after")
    args = parser.parse_args()
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = WorkerPool("interpreter" if args.cpu_dry_run else "gpu")
    fault_n, example_sizes = FAULT_N, EXAMPLE_SIZES
    if args.cpu_dry_run:
        fault_n = 90
        example_sizes = {"matmul": {"size": 48}, "softmax": {"rows": 8, "cols": 200}, "gelu_bias": {"n": 300}}
        for gpu_only in ("illegal_memory", "out_of_memory"):
            FAULT_EXPECTATIONS.pop(gpu_only)
    wanted = set(args.only)

    def want(name: str) -> bool:
        return not wanted or name in wanted

    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "python": platform.python_version(),
                     "pool_devices": pool.devices, "faults": [], "unchanged": [], "improvements": [], "recheck": [],
                     "steps": [], "step_time": {}, "test_style": [], "autograd_autotune": [], "wild": [],
                     "containment": [], "skipped_sections": [], "command": " ".join(sys.argv)}

    def section(name: str) -> bool:
        """Whether a section still fits the budget (and was asked for); results so far are written out."""
        (out / "verify_gpu.json").write_text(json.dumps(results, indent=2, default=str))
        if wanted and name not in wanted and not any(w.startswith(name) for w in wanted):
            return False
        if time.monotonic() - started > args.budget_s:
            results["skipped_sections"].append(name)
            print(f"section {name}: skipped (budget of {args.budget_s:.0f} s spent)", flush=True)
            return False
        return True
    base = (FAULTS / "base.py").read_text()
    fault_opts = dict(pool=pool, input_kwargs={"n": fault_n}, timing=False, compile_timeout_s=60, run_timeout_s=60)
    for fault, (expected, needle) in FAULT_EXPECTATIONS.items():
        if not want(fault) and not want("faults"):
            continue
        opts = VerifyOptions(**{**fault_opts, **({"compile_timeout_s": 20} if fault == "hang" else {})})
        row = run_one(pool, fault, (FAULTS / f"{fault}.py").read_text(), base, opts)
        text = (row["summary"] + " " + json.dumps(row["report"]["checks"])).lower()
        row["expected"] = expected
        row["caught"] = row["status"] == expected and needle.lower() in text
        if row["status"] in ("crash", "timeout"):
            again = run_one(pool, "base", base, base, VerifyOptions(**fault_opts))
            row["recovered"] = again["status"] == "verified"
            row["recovery_wall_s"] = again["wall_s"]
        results["faults"].append(row)
        print(f"fault {fault}: {row['status']} caught={row['caught']} ({row['wall_s']} s)", flush=True)

    if section("containment"):
        run_containment(results, pool, VerifyOptions(**fault_opts))

    timing_opts = dict(pool=pool, timing_rounds=args.rounds, compile_timeout_s=120, run_timeout_s=300)
    tmp = Path(tempfile.mkdtemp(prefix="mtmc-verify-gpu-"))

    if section("steps"):
        run_steps(results, args, tmp)
    if section("test_style"):
        run_test_style(results, pool, args)
    if section("autograd_autotune"):
        run_autograd_autotune(results, pool, args)
    if not section("examples"):
        example_sizes = {}
    for example, sizes in example_sizes.items():
        if not want(example):
            continue
        text = (EXAMPLES / f"{example}.py").read_text()
        row = run_one(pool, example, text, text, VerifyOptions(input_kwargs=sizes, **timing_opts))
        row["sizes"] = sizes
        results["unchanged"].append(row)
        print(f"unchanged {example}: {row.get('speedup')} +/- {row.get('band')}", flush=True)

    for example, what, replacements in IMPROVEMENTS:
        if not want(f"improve_{example}") and not want("examples") or not section("examples"):
            continue
        old = (EXAMPLES / f"{example}.py").read_text()
        new = old
        for a, b in replacements:
            new = new.replace(a, b)
        row = run_one(pool, f"{example}: {what}", new, old,
                      VerifyOptions(input_kwargs=example_sizes[example], **timing_opts))
        results["improvements"].append(row)
        print(f"improvement {example}: {row.get('speedup')} +/- {row.get('band')}", flush=True)

    if section("recheck"):
        slow = base.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
            "    return out\n", "    time.sleep(0.005)  # the old version idles the GPU for 5 ms per call\n    return out\n", 1)
        row = run_one(pool, "recheck: 5 ms host sleep removed", base, slow,
                      VerifyOptions(input_kwargs={"n": 300 if args.cpu_dry_run else 1 << 20}, **timing_opts))
        results["recheck"].append(row)
        print(f"recheck: {row.get('speedup')} believed={row.get('believed')} {row.get('recheck')}", flush=True)

    if section("wild"):  # last: it stops file by file when the budget is spent
        run_wild(results, pool, args, started)
    pool.close()
    for row in (results["faults"] + results["containment"] + results["unchanged"] + results["improvements"]
                + results["recheck"] + results["test_style"] + results["autograd_autotune"] + results["wild"]):
        if row["report"].get("environment"):
            results.setdefault("environment", row["report"]["environment"])
    results["total_s"] = round(time.monotonic() - started, 1)
    (out / "verify_gpu.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "verify_gpu.md").write_text(markdown_summary(results))
    print_table(results)
    ok = all(r["caught"] and r.get("recovered", True) for r in results["faults"] + results["containment"]) and all(
        r["status"] == "verified" and (r.get("within_noise") or args.cpu_dry_run) for r in results["unchanged"])
    wild_ok = all(r["status"] == "verified" for r in results["wild"])
    print(f"\nall faults caught and unchanged kernels within noise: {ok}; wild dev corpus all verified: {wild_ok}")
    return 0 if ok else 1


def run_containment(results: dict, pool: WorkerPool, options: VerifyOptions) -> None:
    """Each planted attack on the containment (issue 33): 3x + y against base.py's 2x + y after a way out of the
    check; caught when it is reported incorrect and the host sees nothing of it (``escapes``)."""
    base = (FAULTS / "base.py").read_text()
    scratch = Path(tempfile.mkdtemp(prefix="mtmc-verify-gpu-attacks-"))
    write_dirs = [scratch, ROOT, Path(os.path.expanduser("~")), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
    for name in ATTACKS:
        if any(not w.checker.alive for w in pool._workers):  # a checker to aim at, as a real attacker finds it
            run_one(pool, "base", base, base, options, keep_report=False)
        targets = aim(pool._workers[0].checker.proc.pid, write_dirs)
        for worker in pool._workers[1:]:
            targets["checker_pids"] += aim(worker.checker.proc.pid, [])["checker_pids"]
        watch = StopWatch([os.getpid(), *targets["checker_pids"]], scratch / f"stopped-{name}")
        try:
            row = run_one(pool, f"attack {name}", attack_text(name, targets), base, options)
        finally:
            time.sleep(0.2)
            watch.close()
        said = [r for w in pool._workers for r in reports(w.log_tail()) if r.get("marker") == targets["marker"]]
        row.update(attack=name, expected="incorrect", said=said[-1] if said else None,
                   escaped=escapes(name, said[-1] if said else None, targets, watch.stopped()),
                   containment=(row["report"].get("raw") or {}).get("runtime", {}).get("containment"))
        row["caught"] = row["status"] == "incorrect" and not row["escaped"]
        results["containment"].append(row)
        results["sandbox"] = {w.name: w.contained for v in pool._workers for w in (v, v.checker) if w.contained}
        print(f"attack {name}: {row['status']} escaped={row['escaped']} ({row['wall_s']} s)", flush=True)


def markdown_summary(results: dict) -> str:
    """verify_gpu.md: the machine, the containment, and a table per section that ran."""
    env = results.get("environment") or {}
    lines = [f"# The verifier's planted faults and attacks ({results['date']})", "",
             f"{env.get('device_name')}, torch {env.get('torch')}, triton {env.get('triton')}, CUDA {env.get('cuda')}, "
             f"Python {env.get('python')}; workers {', '.join(results['pool_devices'])}.", "",
             f"Command: `{results.get('command')}`; {results.get('total_s')} s.", ""]
    if results.get("sandbox"):
        lines += ["Containment: " + "; ".join(f"{name}: {text}" for name, text in results["sandbox"].items()), ""]
    for title, rows in (("Planted faults (tests/corpus/faults against base.py)", results["faults"]),
                        ("Containment attacks (tests/corpus/containment_attacks.py)", results["containment"])):
        if not rows:
            continue
        caught = sum(1 for r in rows if r["caught"] and r.get("recovered", True))
        lines += [f"## {title}: {caught} of {len(rows)} caught", "",
                  "| fault | expected | verdict | caught | recovered | escaped (host's view) | wall s |",
                  "|---|---|---|---|---|---|---:|"]
        for r in rows:
            recovered = "" if "recovered" not in r else ("yes" if r["recovered"] else "NO")
            escaped = "; ".join(r.get("escaped", [])) if "escaped" in r else ""
            lines.append(f"| {r.get('attack', r['name'])} | {r['expected']} | {r['status']} | "
                         f"{'yes' if r['caught'] else 'NO'} | {recovered} | {escaped or ('nothing' if 'escaped' in r else '')} "
                         f"| {r['wall_s']} |")
        lines.append("")
    others = {name: len(results[name]) for name in ("unchanged", "improvements", "recheck", "test_style",
                                                    "autograd_autotune", "wild", "steps") if results.get(name)}
    if others:
        lines += ["Other sections (rows in verify_gpu.json): " + ", ".join(f"{k} {v}" for k, v in others.items()), ""]
    if results.get("skipped_sections"):
        lines += ["Skipped (budget): " + ", ".join(results["skipped_sections"]), ""]
    return "\n".join(lines)


def run_steps(results: dict, args, tmp: Path) -> None:
    """Per-step verification time, legacy settings vs current, each in its own worker and Triton cache."""
    sources = [sorted(EXAMPLES.glob("[!_]*.py")), [f for f in kernel_files() if f.parent != EXAMPLES],
               sorted(f for f in WILD_DEV.glob("*.py") if "test" not in f.stem) if WILD_DEV.exists() else []]
    files = [f for group in zip(*[s + [None] * (max(map(len, sources)) - len(s)) for s in sources])
             for f in group if f is not None]  # examples, corpus kernels and wild files taken in turn
    steps: list = []
    per_file = [policy_steps(f, 1) for f in files]
    while len(steps) < args.steps and any(per_file):  # round robin: one step per file, then the next
        for group in per_file:
            if group and len(steps) < args.steps:
                steps.append(group.pop(0))
    pools = {"legacy": gpu_pool(str(tmp / "cache-legacy"), args.cpu_dry_run),
             "current": gpu_pool(str(tmp / "cache-current"), args.cpu_dry_run)}
    settings = {"legacy": LEGACY, "current": {}}
    common = dict(compile_timeout_s=120, run_timeout_s=300, compile_for_target=False)
    warm = (EXAMPLES / "gelu_bias.py").read_text()
    for name, pool in pools.items():  # start each worker outside the measurement
        run_one(pool, "warm-up", warm, warm, VerifyOptions(pool=pool, **common, **settings[name]), keep_report=False)
    for index, (label, new, old) in enumerate(steps):
        order = ["legacy", "current"] if index % 2 == 0 else ["current", "legacy"]
        row = {"name": label}
        for name in order:
            pool = pools[name]
            one = run_one(pool, label, new, old, VerifyOptions(pool=pool, **common, **settings[name]), keep_report=False)
            row[name] = {k: one.get(k) for k in ("status", "wall_s", "phases", "speedup", "band", "baseline_ms",
                                                   "candidate_ms", "sizing", "summary")}
        results["steps"].append(row)
        print(f"step {label[:60]:60s} legacy {row['legacy']['wall_s']:6.2f} s {row['legacy']['status']:10s} "
              f"current {row['current']['wall_s']:6.2f} s {row['current']['status']}", flush=True)
    for pool in pools.values():
        pool.close()
    summary = {}
    for name in ("legacy", "current"):
        rows = [r[name] for r in results["steps"]]
        fast = [r["wall_s"] for r in rows if (r.get("baseline_ms") or 0) < 1.0]
        summary[name] = {"steps": len(rows), "p50_s": percentile([r["wall_s"] for r in rows], 0.5),
                         "p95_s": percentile([r["wall_s"] for r in rows], 0.95),
                         "under_1ms_steps": len(fast), "under_1ms_p50_s": percentile(fast, 0.5),
                         "under_1ms_p95_s": percentile(fast, 0.95),
                         "phases_median_s": {phase: statistics.median(r["phases"].get(phase, 0.0) for r in rows)
                                             for phase in sorted({p for r in rows for p in r["phases"]})}}
        agree = [r for r in results["steps"] if r["legacy"]["status"] == r["current"]["status"]]
        summary["same_verdict"] = f"{len(agree)}/{len(results['steps'])}"
    results["step_time"] = summary


def run_test_style(results: dict, pool: WorkerPool, args) -> None:
    """Test-style files: unchanged (1.0x within noise) and the policy's top step, timed by replay."""
    if not WILD_DEV.exists():
        return
    opts = dict(pool=pool, timing_rounds=args.rounds, compile_timeout_s=120, run_timeout_s=300)
    for path in sorted(WILD_DEV.glob("*_test.py")):
        text = path.read_text()
        row = run_one(pool, f"{path.stem}: unchanged", text, text, VerifyOptions(**opts), keep_report=False)
        results["test_style"].append(row)
        print(f"test style {row['name'][:50]:50s} {row['status']:10s} {row.get('speedup')} +/- {row.get('band')} "
              f"({row.get('method')})", flush=True)
        for label, new, old in policy_steps(path, 1)[:2]:
            row = run_one(pool, label, new, old, VerifyOptions(**opts), keep_report=False)
            results["test_style"].append(row)
            print(f"test style {label[:50]:50s} {row['status']:10s} {row.get('speedup')} +/- {row.get('band')} "
                  f"({row.get('method')})", flush=True)


def run_autograd_autotune(results: dict, pool: WorkerPool, args) -> None:
    """A test that calls .backward(), and the autotuned corpus matmul, each against itself."""
    text = AUTOGRAD_TEST.read_text()
    opts = dict(pool=pool, timing_rounds=args.rounds, compile_timeout_s=180, run_timeout_s=300)
    for name, new in (("autograd test", text), ("autotuned matmul", (KERNELS / "matmul_autotuned.py").read_text())):
        row = run_one(pool, name, new, new, VerifyOptions(**opts), keep_report=False)
        results["autograd_autotune"].append(row)
        print(f"{name}: {row['status']} {row['summary'][:160]}", flush=True)


def run_wild(results: dict, pool: WorkerPool, args, started: float) -> None:
    """Every wild dev file verified against itself (correct kernels must verify)."""
    if not WILD_DEV.exists():
        return
    opts = dict(pool=pool, timing_rounds=3, compile_timeout_s=180, run_timeout_s=300)
    for path in sorted(WILD_DEV.glob("*.py")):
        if time.monotonic() - started > args.budget_s:
            results["skipped_sections"].append(f"wild from {path.name}")
            break
        text = path.read_text()
        row = run_one(pool, path.stem, text, text, VerifyOptions(**opts), keep_report=False)
        results["wild"].append(row)
        print(f"wild {path.stem:40s} {row['status']:10s} {row['wall_s']:6.1f} s {row['summary'][:120]}", flush=True)


def print_table(results: dict) -> None:
    env = results.get("environment") or {}
    timing = results.get("step_time") or {}
    for name in ("legacy", "current"):
        t = timing.get(name)
        if t:
            print(f"per-step verification ({name}): {t['steps']} steps, p50 {t['p50_s']} s, p95 {t['p95_s']} s; "
                  f"kernels under 1 ms: p50 {t['under_1ms_p50_s']} s, p95 {t['under_1ms_p95_s']} s; "
                  f"median phases {t['phases_median_s']}")
    print(f"\nverifier on {env.get('device_name')} (torch {env.get('torch')}, triton {env.get('triton')})")
    print(f"{'planted fault':16s} {'expected':14s} {'got':14s} caught recovered  wall s  line")
    for r in results["faults"]:
        rec = "" if "recovered" not in r else ("yes" if r["recovered"] else "NO")
        line = "" if r["error_line"] is None else str(r["error_line"] + 1)
        print(f"{r['name']:16s} {r['expected']:14s} {r['status']:14s} {'yes' if r['caught'] else 'NO':6s} "
              f"{rec:9s} {r['wall_s']:6.1f}  {line}")
    for r in results.get("containment", []):
        print(f"{r['attack']:24s} {r['expected']:10s} {r['status']:12s} {'yes' if r['caught'] else 'NO':4s} "
              f"escaped: {'; '.join(r['escaped']) or 'nothing'}")
    if results.get("test_style"):
        print(f"\n{'test-style file and step':52s} {'status':13s} {'speedup':>8s} {'band':>7s}  timed")
        for r in results["test_style"]:
            speed = f"{r['speedup']:7.3f}x {r['band']:7.3f}" if "speedup" in r else f"{'-':>8s} {'-':>7s}"
            print(f"{r['name'][:52]:52s} {r['status']:13s} {speed}  {r.get('method') or r['summary'][:80]}")
    for r in results.get("autograd_autotune", []):
        print(f"{r['name']}: {r['status']} ({r['summary'][:120]})")
    if results.get("wild"):
        verified = [r for r in results["wild"] if r["status"] == "verified"]
        print(f"wild dev corpus against itself: {len(verified)}/{len(results['wild'])} verified; not: "
              + ", ".join(f"{r['name']} {r['status']}" for r in results["wild"] if r["status"] != "verified"))
    print(f"\n{'scenario':52s} {'status':9s} {'old ms':>8s} {'new ms':>8s} {'speedup':>8s} {'band':>7s} noise  roofline")
    for r in results["unchanged"] + results["improvements"] + results["recheck"]:
        if "speedup" not in r:
            print(f"{r['name'][:52]:52s} {r['status']:9s} {r['summary'][:80]}")
            continue
        roof = f"{r['roofline_pct']:.0f}%" if r.get("roofline_pct") is not None else "-"
        print(f"{r['name'][:52]:52s} {r['status']:9s} {r['baseline_ms']:8.4f} {r['candidate_ms']:8.4f} "
              f"{r['speedup']:7.3f}x {r['band']:7.3f} {'in' if r['within_noise'] else 'out':5s}  {roof}")


if __name__ == "__main__":
    sys.exit(main())
