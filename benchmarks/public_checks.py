"""What the editor's static checks say about public Triton code: each finding a user of those libraries would see.

``python benchmarks/public_checks.py --heldout NAME ... [--sample N]`` runs ``optimizer.checks.run_checks`` (the
diagnostics the server publishes as you type, without the compile-for-target ones) over the kernel files that
``public_survey.py --extract`` copied into ``.public/`` (the same seeded sample as the survey). It writes
``benchmarks/results/public/checks.md``: counts per part, check and severity, and for the development part every
finding with its file, line and message, for a reader to judge which are right. Held-out repositories are counted,
never listed: their findings are not read to tune the checks.
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
from public_survey import PUBLIC, SOURCES, sampled_files  # noqa: E402
from bench import engine_version  # noqa: E402

from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.checks import run_checks  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def check_file(path: Path, target) -> list[dict]:
    """The findings on one file (an analysis failure is one finding of code ``error``)."""
    text = path.read_text(errors="replace")
    try:
        findings = run_checks(analyze(text, str(path)), target)
    except Exception as exc:  # noqa: BLE001 - a crash on public code is a result
        return [{"code": "error", "severity": "error", "line": None, "message": f"{type(exc).__name__}: {exc}"[:200]}]
    return [{"code": f.code, "severity": f.severity, "line": f.span.start.line + 1, "message": f.message}
            for f in findings]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", action="append", default=[], help="a repository of the held-out part (repeatable)")
    parser.add_argument("--sample", type=int, default=0, help="at most this many files per repository (seeded as the survey)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default="h100")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "public"))
    args = parser.parse_args(argv)
    sources = json.loads((PUBLIC / SOURCES).read_text()) if (PUBLIC / SOURCES).is_file() else {}
    if not sources:
        print(f"nothing to check: extract repositories into {PUBLIC} first (public_survey.py --extract)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    target = get_profile(args.target)
    rows, files_per_part = [], Counter()
    for repo in sorted(sources):
        files = sampled_files(repo, args.sample, args.seed)
        part = "heldout" if repo in args.heldout else "dev"
        files_per_part[part] += len(files)
        for path in files:
            rows += [{"part": part, "repo": repo, "file": str(path.relative_to(PUBLIC)), **f}
                     for f in check_file(path, target)]
    command = "python benchmarks/public_checks.py" + "".join(f" --heldout {h}" for h in args.heldout) + \
        (f" --sample {args.sample} --seed {args.seed}" if args.sample else "") + f" --target {args.target}"
    meta = {"engine": engine_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "target": args.target, "command": command, "seconds": round(time.perf_counter() - start, 1)}
    counts = Counter((r["part"], r["code"], r["severity"]) for r in rows)
    lines = ["# The static checks on public Triton code", "",
             f"Engine: {meta['engine']}; {meta['date']}; target {args.target}; `{command}`; {meta['seconds']:.0f} s. "
             "The diagnostics the server publishes as you type (docs/checks.md), without the compile-for-target ones, "
             "on the survey's sample of each repository (`.public/`, never committed).", "",
             "| part | files | check | severity | findings |", "|---|---:|---|---|---:|"]
    for (part, code, severity), n in sorted(counts.items()):
        lines.append(f"| {part} | {files_per_part[part]} | {code} | {severity} | {n} |")
    lines += ["", "Every finding on the development part (held-out findings are counted above, not listed):", "",
              "| file | line | check | message |", "|---|---:|---|---|"]
    lines += [f"| {r['file']} | {r['line']} | {r['code']} | {r['message'].replace('|', '/')} |"
              for r in rows if r["part"] == "dev"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "checks.md").write_text("\n".join(lines) + "\n")
    (out / "checks.json").write_text(json.dumps({**meta, "files": dict(files_per_part),
                                                 "findings": [r for r in rows if r["part"] == "dev"],
                                                 "counts": [list(k) + [n] for k, n in sorted(counts.items())]},
                                                indent=1) + "\n")
    print(f"{len(rows)} findings on {sum(files_per_part.values())} files; {meta['seconds']:.0f} s -> {out / 'checks.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
