"""TritonBench-G, held out: for how many kernels is a structural step offered that applies and keeps the results?

TritonBench-G (github.com/thunlp/TritonBench, ``data/TritonBench_G_v1``: 184 files of real-world Triton code,
each ending in its own test, ``result_gold = test_...()``) is never committed: copy it into the ignored
``.tritonbench/G/`` folder. Then, CPU only:

``python benchmarks/tritonbench_survey.py --plan`` lists ``optimizer.actions.applicable`` for every kernel,
applies the first candidate of each structural action (wild_actions.NOT_STRUCTURAL excluded) and writes each
edited file to ``.tritonbench/variants/`` with ``.tritonbench/manifest.json``; ``tritonbench_run.py`` (torch only:
on a GPU machine, or here with ``TRITON_INTERPRET=1``) runs originals and variants and writes results; and
``python benchmarks/tritonbench_survey.py --report RESULTS.json --out benchmarks/results/tritonbench`` counts,
per kernel, whether a structural step was offered, applied, ran and kept ``result_gold``. To compare two engines
without running everything twice, ``--changed OLD_FOLDER`` writes ``.tritonbench/run_manifest_changed.json``: only the
variants whose text differs from the same step's in ``OLD_FOLDER/variants`` (an earlier plan kept there), and
``--report OLD_RESULTS NEW_RESULTS`` reads the later results over the earlier ones. The held-out set is surveyed,
never read to tune the engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401
from bench import engine_version  # noqa: E402
from wild_actions import NOT_STRUCTURAL, pct  # noqa: E402

from mtmc_lsp.optimizer.actions import applicable, apply_candidate  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / ".tritonbench"


def plan(folder: Path, target) -> list[dict]:
    """One manifest entry per file: its kernels, the structural actions offered each, and the variants written."""
    variants = BENCH / "variants"
    variants.mkdir(parents=True, exist_ok=True)
    entries = []
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        entry = {"file": str(path.relative_to(BENCH)), "kernels": {}, "variants": {}, "failed": {}}
        try:
            analysis = analyze(text, path.name)
            kernels = analysis.kernels
        except Exception as exc:  # noqa: BLE001 - an analysis crash is a finding
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entries.append(entry)
            continue
        for kernel in kernels:
            try:
                offered = applicable(analysis, kernel, target)
            except Exception as exc:  # noqa: BLE001
                entry["failed"][kernel.name] = f"applicable: {type(exc).__name__}: {exc}"
                offered = []
            firsts = {}
            for candidate in offered:
                if candidate.action not in NOT_STRUCTURAL:
                    firsts.setdefault(candidate.action, candidate)
            entry["kernels"][kernel.name] = sorted({c.action for c in offered})
            for action, candidate in firsts.items():
                name = f"{kernel.name}.{action}"
                try:
                    new_text = apply_candidate(text, candidate, target).new_text
                except Exception as exc:  # noqa: BLE001 - offered but not applying: counted
                    entry["failed"][name] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                out = variants / f"{path.stem}.{name}.py"
                out.write_text(new_text)
                entry["variants"][name] = str(out.relative_to(BENCH))
        entries.append(entry)
    return entries


def changed(entries: list[dict], old: Path) -> list[dict]:
    """The run manifest of the variants whose text is new or differs from the same step's under ``old/variants``."""
    out = []
    for entry in entries:
        fresh = {name: path for name, path in entry["variants"].items()
                 if not (old / path).is_file() or (old / path).read_text() != (BENCH / path).read_text()}
        if fresh:
            out.append({"file": entry["file"], "variants": fresh})
    return out


def merged(paths: list[str]) -> dict[str, dict]:
    """Results by file, later files' verdicts over earlier ones (a variant at a time; the original's when it ran)."""
    out: dict[str, dict] = {}
    for path in paths:
        for result in json.loads(Path(path).read_text()):
            known = out.setdefault(result["file"], {"file": result["file"], "original": result["original"], "variants": {}})
            if result["original"] == "ran" or known["original"] != "ran":
                known["original"] = result["original"]
            known["variants"].update(result["variants"])
    return out


def report(entries: list[dict], results: dict[str, dict]) -> dict:
    """Per-kernel counts: offered a structural step, one that applies, runs, and keeps result_gold."""
    counts = Counter()
    by_action = Counter()
    bad = []
    for entry in entries:
        result = results.get(entry["file"], {})
        judged = result.get("original") == "ran"
        counts["files"] += 1
        counts["files_judged"] += judged
        for kernel, actions in entry["kernels"].items():
            counts["kernels"] += 1
            structural = [a for a in actions if a not in NOT_STRUCTURAL]
            counts["any_action"] += bool(actions)
            counts["structural"] += bool(structural)
            names = [f"{kernel}.{a}" for a in structural]
            applied = [n for n in names if n in entry["variants"]]
            counts["applies"] += bool(applied)
            verdicts = {n: result.get("variants", {}).get(n) for n in applied}
            kept = [n for n, v in verdicts.items() if v == "kept"]
            counts["kept"] += bool(kept)
            counts["judged_kernels"] += judged
            counts["structural_judged"] += bool(structural) and judged
            counts["kept_of_judged"] += bool(kept) and judged
            for n in kept:
                by_action[n.split(".", 1)[1]] += 1
            for n in names:
                if n in entry["failed"]:
                    counts["steps_not_applying"] += 1
                    bad.append((entry["file"], n, entry["failed"][n]))
            for n, v in verdicts.items():
                counts["steps_offered"] += 1
                if judged and v == "changed":
                    counts["steps_changed_results"] += 1
                    bad.append((entry["file"], n, "changed result_gold"))
                elif judged and v and v.startswith("error"):
                    counts["steps_failed_to_run"] += 1
                    bad.append((entry["file"], n, v))
    return {"counts": dict(counts), "kept_by_action": dict(by_action.most_common()), "problems": bad}


def markdown(summary: dict, command: str, seconds: float, engine: str) -> str:
    c = summary["counts"]
    k = c["kernels"]
    j = c.get("judged_kernels", 0)
    lines = [
        "# TritonBench-G (held out): structural steps that apply and keep the results",
        "",
        f"Engine: {engine}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `{command}`; plan {seconds:.0f} s "
        "on the 2-core CPU machine. Files from github.com/thunlp/TritonBench `data/TritonBench_G_v1` (never committed); "
        "each file's own test (`result_gold`) run before and after each step by benchmarks/tritonbench_run.py.",
        "",
        "| kernels | any action | structural step offered | applies | keeps result_gold | files whose original ran (twice, same result) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {k} | {pct(c.get('any_action', 0), k)} | {pct(c.get('structural', 0), k)} | {pct(c.get('applies', 0), k)} | "
        f"{pct(c.get('kept', 0), k)} | {c.get('files_judged', 0)}/{c.get('files', 0)} |",
        "",
        f"Of the {j} kernels in files whose original runs (twice, the same result) in the interpreter: a structural step "
        f"offered for {pct(c.get('structural_judged', 0), j)}, one that keeps result_gold for {pct(c.get('kept_of_judged', 0), j)}.",
        "",
        f"Structural steps applied: {c.get('steps_offered', 0)}; offered but not applying: {c.get('steps_not_applying', 0)}; "
        f"changed the results: {c.get('steps_changed_results', 0)}; failed to run: {c.get('steps_failed_to_run', 0)}.",
        "",
        "| action | kernels where it kept the results |",
        "|---|---:|",
        *[f"| {a} | {n} |" for a, n in summary["kept_by_action"].items()],
        "",
        "Problems (file, step, what):",
        "",
        *[f"- {f} `{n}`: {why}" for f, n, why in summary["problems"]],
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="write variants and .tritonbench/manifest.json")
    parser.add_argument("--report", metavar="RESULTS", nargs="+", help="results of tritonbench_run.py (later ones win)")
    parser.add_argument("--manifest", default=str(BENCH / "manifest.json"), help="the plan to report on")
    parser.add_argument("--changed", metavar="OLD_FOLDER", help="write the run manifest of variants new since that plan")
    parser.add_argument("--out", default=None, help="folder for tritonbench.md / .json")
    parser.add_argument("--target", default="h100")
    args = parser.parse_args()
    manifest = Path(args.manifest)
    if args.changed:
        entries = json.loads(manifest.read_text())["entries"]
        fresh = changed(entries, Path(args.changed))
        (BENCH / "run_manifest_changed.json").write_text(json.dumps(fresh, indent=1))
        print(f"{sum(len(e['variants']) for e in fresh)} variants new or changed, in {len(fresh)} files")
    if args.plan:
        start = time.perf_counter()
        entries = plan(BENCH / "G", get_profile(args.target))
        manifest.write_text(json.dumps({"seconds": time.perf_counter() - start, "engine": engine_version(),
                                        "entries": entries}, indent=1))
        runnable = [{"file": e["file"], "variants": e["variants"]} for e in entries if "error" not in e]
        (BENCH / "run_manifest.json").write_text(json.dumps(runnable, indent=1))
        print(f"{len(entries)} files, {sum(len(e['variants']) for e in entries)} variants")
    if args.report:
        data = json.loads(manifest.read_text())
        summary = report(data["entries"], merged(args.report))
        text = markdown(summary, " ".join(sys.argv[1:]), data["seconds"], data.get("engine", "?"))
        print(text)
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "tritonbench.md").write_text(text)
            (out / "tritonbench.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
