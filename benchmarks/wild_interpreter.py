"""Are the steps the engine offers on the wild corpus correct? Checked in the Triton interpreter (CPU).

``python benchmarks/wild_interpreter.py --part heldout [--structural-only] [--out DIR]``: for every kernel of
every file of the part, the first candidate of each action ``mtmc actions`` offers is applied and the
result verified against the original file with ``verify_file`` in the interpreter (small sizes, 2 seeds,
fresh random inputs, the file's own reference when it has one). Writes ``interpreter_PART.md`` and
``.json``: per candidate the verdict, and per action how many were verified, wrong, or could not be
judged. The GPU benchmark (wild_bench.py) measures speed; this measures, on any machine, whether what is
offered keeps the kernel's results. The held-out part is evaluated, never tuned on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401
from bench import engine_version  # noqa: E402
from wild_actions import NOT_STRUCTURAL, PARTS  # noqa: E402

from mtmc_lsp.optimizer.actions import ActionError, applicable, apply_candidate  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402
from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JUDGED = ("verified", "incorrect")


def check_file(path: Path, target, structural_only: bool, options: VerifyOptions) -> list[dict]:
    """One row per (kernel, action): the first candidate applied and verified against the file."""
    text = path.read_text()
    rel = str(path.relative_to(ROOT))
    analysis = analyze(text, rel)
    rows = []
    for kernel in analysis.kernels:
        first: dict[str, object] = {}
        for cand in applicable(analysis, kernel, target):
            if cand.action not in first and not (structural_only and cand.action in NOT_STRUCTURAL):
                first[cand.action] = cand
        for action, cand in first.items():
            row = {"file": rel, "kernel": kernel.name, "action": action, "candidate": cand.key()}
            started = time.monotonic()
            try:
                new_text = apply_candidate(text, cand, target).new_text
            except ActionError as exc:
                rows.append({**row, "status": "not_applied", "summary": str(exc)})
                continue
            report = verify_file(new_text, text, rel, target, options)
            rows.append({**row, "status": report.status, "summary": report.summary,
                         "seconds": round(time.monotonic() - started, 1)})
            print(f"{report.status:<12} {rel}:{kernel.name} {cand.key()}", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict], part: str, meta: dict) -> str:
    per_action: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        per_action[r["action"]][r["status"]] += 1
    statuses = sorted({r["status"] for r in rows})
    judged = [r for r in rows if r["status"] in JUDGED]
    correct = sum(r["status"] == "verified" for r in judged)
    lines = [f"# Offered steps checked in the Triton interpreter: wild corpus, {part} part", "",
             f"Engine: {meta['engine']}; {meta['date']}; target {meta['target']}; `{meta['command']}`; "
             f"{meta['seconds']:.0f} s on the 2-core CPU machine.", "",
             f"The first candidate of each offered action, applied and verified against the original file "
             f"(interpreter, sizes halved to <= 96, {meta['seeds']} seeds). Of {len(judged)} judged steps "
             f"{correct} keep the results ({100 * correct / max(len(judged), 1):.0f}%); steps the interpreter "
             "cannot judge (no harness, bf16 arithmetic, timeouts) are counted apart.", "",
             "| action | " + " | ".join(statuses) + " |", "|---|" + "---:|" * len(statuses)]
    for action, counts in sorted(per_action.items()):
        lines.append(f"| {action} | " + " | ".join(str(counts.get(s, 0)) for s in statuses) + " |")
    lines += ["", "| file | kernel | candidate | status | summary |", "|---|---|---|---|---|"]
    for r in rows:
        summary = r["summary"].replace("|", "/").replace("\n", " ")[:160]
        lines.append(f"| {Path(r['file']).name} | `{r['kernel']}` | `{r['candidate']}` | {r['status']} | {summary} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), default="heldout")
    parser.add_argument("--target", default="h100")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--structural-only", action="store_true", help="skip warps, autotune, contiguity, precision")
    parser.add_argument("--only", action="append", default=[], help="files whose name contains this (repeatable)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "wild"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    options = VerifyOptions(seeds=args.seeds, mode="interpreter", timing=False)
    target = get_profile(args.target)
    files = [p for p in sorted(PARTS[args.part].glob("*.py"))
             if not p.name.startswith("_") and (not args.only or any(o in p.name for o in args.only))]
    rows = []
    for path in files:
        rows += check_file(path, target, args.structural_only, options)
    command = (f"python benchmarks/wild_interpreter.py --part {args.part} --target {args.target} --seeds {args.seeds}"
               + (" --structural-only" if args.structural_only else ""))
    meta = {"engine": engine_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "target": args.target, "command": command, "seconds": time.perf_counter() - start, "seeds": args.seeds}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"interpreter_{args.part}.md").write_text(markdown(rows, args.part, meta))
    (out / f"interpreter_{args.part}.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    counts = Counter(r["status"] for r in rows)
    print(f"{len(rows)} steps: {dict(counts)}; {meta['seconds']:.0f} s -> {out / f'interpreter_{args.part}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
