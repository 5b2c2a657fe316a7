"""Which optimization actions the engine offers on every kernel of the wild corpus (the code `mtmc actions` runs).

``python benchmarks/wild_actions.py [--target h100] [--realworld] [--out benchmarks/results/wild]`` analyses
each file of ``benchmarks/wild/dev`` and ``benchmarks/wild/heldout`` (and, with ``--realworld``,
``tests/corpus/realworld``), lists ``optimizer.actions.applicable`` for every kernel, applies every
candidate with ``apply_candidate`` (to see that what is offered also applies), and writes
``actions.md`` (a table: file, part, kernel, actions offered, plus summary rates) and ``actions.json``.
CPU only; no kernel runs. The held-out part is listed for coverage, never tuned on (benchmarks/wild/README.md).
``--verify`` instead runs ``mtmc verify FILE --json`` on every file (the installed project; the interpreter on a
machine without a GPU) and writes ``verify.md`` / ``verify.json``: which files the verifier can check, and how.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate  # noqa: E402
from mtmc_lsp.optimizer.actions.refusals import refusals  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.analysis.workspace import with_foreign_launches  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402
from bench import engine_version  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARTS = {"dev": ROOT / "benchmarks" / "wild" / "dev", "heldout": ROOT / "benchmarks" / "wild" / "heldout"}
REALWORLD = ROOT / "tests" / "corpus" / "realworld"
# Launch knobs (warps, autotune), a compiler hint (contiguity) and numerics (precision) are not
# structural; everything else changes the work a program does or the order it does it in.
NOT_STRUCTURAL = {"warps", "autotune", "contiguity", "precision"}


def corpus_files(realworld: bool) -> list[tuple[str, Path]]:
    """(part, path) for every wild file, dev first, in name order."""
    files = [(part, p) for part, folder in PARTS.items() for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]
    if realworld:
        files += [("realworld", p) for p in sorted(REALWORLD.glob("*.py"))]
    return files


def survey_text(text: str, rel: str, target, allow_precision: bool = False, disk_path: Path | None = None,
                **fields) -> list[dict]:
    """One row per kernel of one file (``fields`` added to each): the candidates offered, whether each
    applies, and whether its edit still parses and keeps the kernel (a fusion: some kernel); one row
    with ``error`` when the file cannot be analysed, one without a kernel when it has none. With
    ``disk_path``, launches in the modules that import the file count too (``launched_elsewhere``)."""
    try:
        # Once per file (applicable would search again for every kernel); ``disk_path`` where ``rel`` is not one.
        analysis = with_foreign_launches(analyze(text, rel), str(disk_path) if disk_path is not None else None)
    except Exception as exc:  # noqa: BLE001 - a crash of the analysis is a finding, not the end of the survey
        return [{"file": rel, **fields, "kernel": None, "error": f"analyze: {type(exc).__name__}: {exc}"}]
    if analysis.syntax_error is not None:
        return [{"file": rel, **fields, "kernel": None, "error": f"syntax: {analysis.syntax_error.message}"}]
    if not analysis.kernels:
        return [{"file": rel, **fields, "kernel": None, "error": None, "candidates": []}]
    rows = []
    for kernel in analysis.kernels:
        row = {"file": rel, **fields, "kernel": kernel.name, "error": None,
               "launched_here": bool(analysis.launches_of(kernel.name)),
               "launched_elsewhere": any(f.kernel == kernel.name for f in analysis.foreign_launches),
               # a @triton.jit function another kernel of the file calls: never launched, by design
               "device_function": any(kernel.name in k.called_functions for k in analysis.kernels if k is not kernel),
               "candidates": []}
        try:
            candidates = applicable(analysis, kernel, target, allow_precision=allow_precision)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"applicable: {type(exc).__name__}: {exc}"
            rows.append(row)
            continue
        for cand in candidates:
            entry = {**cand.to_json(), "key": cand.key(), "applies": True, "keeps_kernel": None, "apply_error": None}
            try:
                new_text = apply_candidate(text, cand, target).new_text
                ast.parse(new_text)
                left = {k.name for k in analyze(new_text, rel).kernels}
                # A fusion removes the kernels it fuses away (the consumer, a flash chain's first two):
                # then some kernel must remain; any other step keeps this one.
                entry["keeps_kernel"] = bool(left) if cand.kind == "Fusion" else kernel.name in left
            except ActionError as exc:
                entry.update(applies=False, apply_error=f"ActionError: {exc}")
            except SyntaxError as exc:
                entry.update(applies=False, apply_error=f"edit does not parse: {exc}")
            except Exception as exc:  # noqa: BLE001 - an action crashing is an engine bug to report
                entry.update(applies=False, apply_error=f"{type(exc).__name__}: {exc}")
            row["candidates"].append(entry)
        if row["launched_here"] and not any(c["action"] not in NOT_STRUCTURAL for c in row["candidates"]):
            # No structural step: keep each structural action's reason (``mtmc actions --why``) for the report.
            row["refused"] = {r.action: r.reason for r in refusals(analysis, kernel, target, allow_precision)
                              if r.action not in NOT_STRUCTURAL and r.reason}
        rows.append(row)
    return rows


def refusal_pattern(reason: str) -> str:
    """A reason with its quoted code and block names replaced, so that reasons of one kind count together."""
    reason = re.sub(r"`[^`]*`", "`...`", reason)
    return re.sub(r"\b[A-Z][A-Z0-9_]*\b(?=:)", "BLOCK", reason)[:140]


def refusal_table(rows: list[dict], action: str = "tiling", top: int = 8) -> list[str]:
    """Markdown: the commonest reasons ``action`` gives on kernels launched in their file with no structural step."""
    reasons = Counter(refusal_pattern(r["refused"][action]) for r in rows if action in r.get("refused", {}))
    if not reasons:
        return []
    total = sum(1 for r in rows if "refused" in r)
    lines = ["", f"Why {action} is not offered, on the {total} kernels launched in their file that get no structural "
             f"step (`mtmc actions --why`; code quoted in a reason shown as `...`):", "",
             "| reason | kernels |", "|---|---:|"]
    return lines + [f"| {why.replace('|', '/')} | {n} |" for why, n in reasons.most_common(top)]


def survey(files: list[tuple[str, Path]], target_key: str, allow_precision: bool) -> list[dict]:
    """One row per kernel of every file: ``survey_text`` over the corpus."""
    target = get_profile(target_key)
    return [row for part, path in files
            for row in survey_text(path.read_text(), str(path.relative_to(ROOT)), target, allow_precision, part=part)]


def summarize(rows: list[dict]) -> dict:
    """Rates per part: kernels with any action, any structural action, and per action."""
    out = {}
    for part in sorted({r["part"] for r in rows}) + ["all"]:
        kernels = [r for r in rows if r["kernel"] and (part == "all" or r["part"] == part)]
        n = len(kernels)
        per_action = Counter()
        for r in kernels:
            per_action.update({c["action"] for c in r["candidates"]})
        structural = [r for r in kernels if any(c["action"] not in NOT_STRUCTURAL for c in r["candidates"])]
        offered = [c for r in kernels for c in r["candidates"]]
        out[part] = {
            "files": len({r["file"] for r in rows if part == "all" or r["part"] == part}),
            "kernels": n,
            "with_any_action": sum(bool(r["candidates"]) for r in kernels),
            "with_structural_action": len(structural),
            "candidates": len(offered),
            "candidates_not_applying": sum(not c["applies"] for c in offered),
            "errors": sum(bool(r["error"]) for r in rows if part == "all" or r["part"] == part),
            "kernels_per_action": {a: per_action.get(a, 0) for a in ACTIONS},
        }
    return out


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "0/0"


def offered_cell(candidates: list[dict]) -> str:
    """``tiling x6, warps x2, pipelining``: distinct actions in registry order with their candidate counts."""
    counts = Counter(c["action"] for c in candidates)
    names = [a for a in ACTIONS if a in counts] + sorted(set(counts) - set(ACTIONS))
    return ", ".join(f"{a} x{counts[a]}" if counts[a] > 1 else a for a in names) or "-"


def markdown(rows: list[dict], summary: dict, target: str, allow_precision: bool, version: str,
             realworld: bool = False) -> str:
    lines = [
        "# Actions offered on the wild corpus",
        "",
        f"Engine: {version}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"`python benchmarks/wild_actions.py --target {target}{' --allow-precision' if allow_precision else ''}"
        f"{' --realworld' if realworld else ''}`: "
        "`optimizer.actions.applicable` (what `mtmc actions` lists) on every kernel, each candidate applied "
        "with `apply_candidate`. Structural = any action other than "
        f"{', '.join(sorted(NOT_STRUCTURAL))}. Held-out files are listed for coverage only, never tuned on.",
        "",
        "| part | files | kernels | any action | structural action | candidates | not applying | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for part, s in summary.items():
        lines.append(f"| {part} | {s['files']} | {s['kernels']} | {pct(s['with_any_action'], s['kernels'])} | "
                     f"{pct(s['with_structural_action'], s['kernels'])} | {s['candidates']} | "
                     f"{s['candidates_not_applying']} | {s['errors']} |")
    lines += ["", "Kernels offered each action:", "", "| action | " + " | ".join(summary) + " |",
              "|---|" + "---:|" * len(summary)]
    for action in ACTIONS:
        lines.append(f"| {action} | " + " | ".join(pct(s["kernels_per_action"][action], s["kernels"]) for s in summary.values()) + " |")
    lines += ["", "| file | part | kernel | actions offered |", "|---|---|---|---|"]
    for r in rows:
        if r["kernel"] is None:
            lines.append(f"| {r['file']} | {r['part']} | - | {r['error'] or 'no kernel'} |")
            continue
        cell = offered_cell(r["candidates"]) if not r["error"] else f"ERROR {r['error']}"
        broken = [c["key"] for c in r["candidates"] if not c["applies"]]
        if broken:
            cell += f" (not applying: {'; '.join(broken)})"
        lines.append(f"| {Path(r['file']).name} | {r['part']} | `{r['kernel']}` | {cell} |")
    dev = [r for r in rows if r["part"] != "heldout"]  # held-out reasons are not read: nothing is tuned to them
    for action in ("tiling", "rows_per_program"):
        lines += refusal_table(dev, action)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def verify_all(files: list[tuple[str, Path]], out: Path) -> None:
    """``mtmc verify FILE --json`` on every file (the interpreter on a CPU machine) -> verify.md and verify.json."""
    rows = []
    for part, path in files:
        rel = str(path.relative_to(ROOT))
        proc = subprocess.run([sys.executable, "-m", "mtmc_lsp", "verify", rel, "--json"], cwd=ROOT, capture_output=True,
                              text=True, timeout=900)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            report = {"status": f"exit {proc.returncode}", "summary": (proc.stderr.strip().splitlines() or [""])[-1]}
        compile_msg = next((c["message"] for c in report.get("checks", []) if c["name"] == "compile"), "")
        target_note = compile_msg.split("; ", 1)[1] if "; " in compile_msg else ""
        rows.append({"file": rel, "part": part, "status": report.get("status"), "summary": report.get("summary", ""),
                     "target_compile": target_note})
        print(f"{rows[-1]['status']:<12} {rel}", file=sys.stderr)
    counts = Counter(r["status"] for r in rows)
    lines = ["# `mtmc verify` on the wild corpus", "",
             f"Engine: {engine_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             "`python benchmarks/wild_actions.py --verify` (on a machine without a GPU: the Triton interpreter, "
             "size knobs halved to at most 96, 3 seeds).", "",
             ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0]))), "",
             "| file | part | status | summary | compile for the target |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {Path(r['file']).name} | {r['part']} | {r['status']} | {_cell(r['summary'])} | "
                     f"{_cell(r['target_compile'])} |")
    (out / "verify.md").write_text("\n".join(lines) + "\n")
    (out / "verify.json").write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="h100")
    parser.add_argument("--allow-precision", action="store_true", help="also list numerics-changing actions")
    parser.add_argument("--realworld", action="store_true", help="also survey tests/corpus/realworld")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "wild"))
    parser.add_argument("--verify", action="store_true",
                        help="instead: run `mtmc verify --json` on every file and write verify.md / verify.json")
    args = parser.parse_args(argv)
    if args.verify:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        verify_all(corpus_files(args.realworld), Path(args.out))
        return 0
    start = time.perf_counter()
    rows = survey(corpus_files(args.realworld), args.target, args.allow_precision)
    summary = summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    version = engine_version()
    (out / "actions.md").write_text(markdown(rows, summary, args.target, args.allow_precision, version, args.realworld))
    (out / "actions.json").write_text(json.dumps({"engine": version, "target": args.target, "allow_precision": args.allow_precision,
                                                  "summary": summary, "kernels": rows}, indent=1) + "\n")
    s = summary["all"]
    print(f"{s['kernels']} kernels in {s['files']} files: any action {pct(s['with_any_action'], s['kernels'])}, "
          f"structural {pct(s['with_structural_action'], s['kernels'])}, {s['candidates']} candidates "
          f"({s['candidates_not_applying']} not applying), {s['errors']} errors; {time.perf_counter() - start:.1f} s "
          f"-> {out / 'actions.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
