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
- a >10x "speedup" (the old version sleeps on the host) to exercise the recheck.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import _bootstrap  # noqa: F401

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "tests" / "corpus" / "faults"
EXAMPLES = ROOT / "mtmc_lsp" / "examples"

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


def run_one(pool: WorkerPool, name: str, new_text: str, old_text: str | None, options: VerifyOptions) -> dict:
    started = time.monotonic()
    report = verify_file(new_text, old_text, f"{name}.py", "h200", options)
    wall = time.monotonic() - started
    data = report.to_json()
    row = {"name": name, "status": report.status, "summary": report.summary, "wall_s": round(wall, 2),
           "error_line": report.error_line, "device": report.device, "reward": data["reward"]}
    if report.speed is not None:
        s = report.speed
        row.update(speedup=s.speedup, band=s.band, within_noise=s.within_noise, baseline_ms=s.baseline_ms,
                   candidate_ms=s.candidate_ms, ratios=s.ratios, roofline_pct=s.roofline_pct, believed=s.believed,
                   recheck=s.recheck, speedup_vs_reference=s.speedup_vs_reference)
    row["report"] = data
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="verify-gpu-out")
    parser.add_argument("--only", action="append", default=[], help="run only these scenario names")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="check this script without a GPU: interpreter, tiny sizes, no GPU-only faults")
    args = parser.parse_args()
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
                     "pool_devices": pool.devices, "faults": [], "unchanged": [], "improvements": [], "recheck": []}
    base = (FAULTS / "base.py").read_text()
    fault_opts = dict(pool=pool, input_kwargs={"n": fault_n}, timing=False, compile_timeout_s=60, run_timeout_s=60)
    for fault, (expected, needle) in FAULT_EXPECTATIONS.items():
        if not want(fault):
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

    timing_opts = dict(pool=pool, timing_rounds=args.rounds, compile_timeout_s=120, run_timeout_s=300)
    for example, sizes in example_sizes.items():
        if not want(example):
            continue
        text = (EXAMPLES / f"{example}.py").read_text()
        row = run_one(pool, example, text, text, VerifyOptions(input_kwargs=sizes, **timing_opts))
        row["sizes"] = sizes
        results["unchanged"].append(row)
        print(f"unchanged {example}: {row.get('speedup')} +/- {row.get('band')}", flush=True)

    for example, what, replacements in IMPROVEMENTS:
        if not want(f"improve_{example}"):
            continue
        old = (EXAMPLES / f"{example}.py").read_text()
        new = old
        for a, b in replacements:
            new = new.replace(a, b)
        row = run_one(pool, f"{example}: {what}", new, old,
                      VerifyOptions(input_kwargs=example_sizes[example], **timing_opts))
        results["improvements"].append(row)
        print(f"improvement {example}: {row.get('speedup')} +/- {row.get('band')}", flush=True)

    if want("recheck"):
        slow = base.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
            "    return out\n", "    time.sleep(0.005)  # the old version idles the GPU for 5 ms per call\n    return out\n", 1)
        row = run_one(pool, "recheck: 5 ms host sleep removed", base, slow,
                      VerifyOptions(input_kwargs={"n": 300 if args.cpu_dry_run else 1 << 20}, **timing_opts))
        results["recheck"].append(row)
        print(f"recheck: {row.get('speedup')} believed={row.get('believed')} {row.get('recheck')}", flush=True)

    pool.close()
    for row in results["faults"] + results["unchanged"] + results["improvements"] + results["recheck"]:
        results.setdefault("environment", row["report"].get("environment"))
    (out / "verify_gpu.json").write_text(json.dumps(results, indent=2))
    print_table(results)
    ok = all(r["caught"] and r.get("recovered", True) for r in results["faults"]) and all(
        r["status"] == "verified" and (r.get("within_noise") or args.cpu_dry_run) for r in results["unchanged"])
    print(f"\nall faults caught and unchanged kernels within noise: {ok}")
    return 0 if ok else 1


def print_table(results: dict) -> None:
    env = results.get("environment") or {}
    print(f"\nverifier on {env.get('device_name')} (torch {env.get('torch')}, triton {env.get('triton')})")
    print(f"{'planted fault':16s} {'expected':14s} {'got':14s} caught recovered  wall s  line")
    for r in results["faults"]:
        rec = "" if "recovered" not in r else ("yes" if r["recovered"] else "NO")
        line = "" if r["error_line"] is None else str(r["error_line"] + 1)
        print(f"{r['name']:16s} {r['expected']:14s} {r['status']:14s} {'yes' if r['caught'] else 'NO':6s} "
              f"{rec:9s} {r['wall_s']:6.1f}  {line}")
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
