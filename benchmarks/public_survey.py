"""What the engine understands and offers on public Triton code it was never written for (CPU only).

``python benchmarks/public_survey.py --extract GIT_DIR NAME ...`` copies every ``*.py`` file that
defines a ``@triton.jit`` kernel from a public repository (a clone or a bare git directory, its
HEAD) into ``.public/NAME/`` (an ignored folder: the code is not ours and is never committed).
``python benchmarks/public_survey.py --heldout NAME ... [--sample N]`` then surveys every kernel:

- the analysis finds it, and finds where it is launched (a launch site in the same file: many
  library kernels are launched from another module, and then no launch edit is possible);
- ``optimizer.actions.applicable`` (what ``mtmc actions`` lists) offers an action, a structural one
  (wild_actions.NOT_STRUCTURAL excluded), and each candidate applies with ``apply_candidate``;
- the edited text still parses and still holds the kernel.

Repositories named by ``--heldout`` form the held-out part: surveyed and reported, never read to tune
the engine. Results go to ``benchmarks/results/public/`` (``survey.md`` and ``survey.json``: rates per
part and per repository, per-action coverage, and the commit of each repository). Nothing runs a kernel.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401
from bench import engine_version  # noqa: E402
from wild_actions import NOT_STRUCTURAL, pct, refusal_table, survey_text  # noqa: E402

from mtmc_lsp.optimizer.actions import ACTIONS  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / ".public"
SOURCES = "SOURCES.json"  # per repository: where it came from and at which commit


def extract(git_dir: str, name: str, dest: Path = PUBLIC) -> int:
    """Copy the Python files of ``git_dir``'s HEAD into ``dest/name`` (all of them: the modules that launch
    a kernel defined elsewhere matter too); the number of kernel files among them."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", git_dir, *args], capture_output=True, text=True, check=True).stdout

    folder = dest / name
    folder.mkdir(parents=True, exist_ok=True)
    for path in git("ls-tree", "-r", "--name-only", "HEAD").split("\n"):
        if not path.endswith(".py"):
            continue
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(git("show", f"HEAD:{path}"))
    copied = len(kernel_files(folder))
    sources = dest / SOURCES
    known = json.loads(sources.read_text()) if sources.is_file() else {}
    known[name] = {"commit": git("rev-parse", "HEAD").strip(), "date": git("log", "-1", "--format=%cs").strip(),
                   "files": copied}
    sources.write_text(json.dumps(known, indent=1) + "\n")
    return copied


def kernel_files(folder: Path) -> list[Path]:
    """The files of an extracted repository that define Triton kernels (what the survey samples)."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(errors="replace")
        if re.search(r"triton.jit|@jit", text) and "triton" in text:  # the pattern the first surveys used (a regex)
            out.append(path)
    return out


def sampled_files(repo: str, sample: int, seed: int) -> list[Path]:
    """The kernel files of ``.public/repo``, at most ``sample`` of them (0: all), drawn with ``seed``: the sample
    this survey and public_checks.py read."""
    files = kernel_files(PUBLIC / repo)
    if sample and len(files) > sample:
        files = sorted(random.Random(f"{seed}:{repo}").sample(files, sample))
    return files


def survey_file(path: Path, repo: str, part: str, target) -> list[dict]:
    """One row per kernel of ``path`` (``wild_actions.survey_text``), named relative to .public/."""
    return survey_text(path.read_text(errors="replace"), str(path.relative_to(PUBLIC)), target, disk_path=path,
                       repo=repo, part=part)


def summarize(rows: list[dict], key: str) -> dict:
    """Rates per value of ``key`` (part or repo) and over all rows."""
    out = {}
    for group in sorted({r[key] for r in rows}) + ["all"]:
        mine = [r for r in rows if group == "all" or r[key] == group]
        kernels = [r for r in mine if r["kernel"]]
        offered = [c for r in kernels for c in r["candidates"]]
        out[group] = {
            "files": len({r["file"] for r in mine}),
            "kernels": len(kernels),
            "launched_here": sum(r.get("launched_here", False) for r in kernels),
            "launched_elsewhere": sum(r.get("launched_elsewhere", False) and not r.get("launched_here") for r in kernels),
            "device_functions": sum(bool(r.get("device_function")) and not r.get("launched_here") for r in kernels),
            "with_any_action": sum(bool(r["candidates"]) for r in kernels),
            "with_structural_action": sum(any(c["action"] not in NOT_STRUCTURAL for c in r["candidates"]) for r in kernels),
            "structural_when_launched_here": sum(any(c["action"] not in NOT_STRUCTURAL for c in r["candidates"])
                                                 for r in kernels if r.get("launched_here")),
            "candidates": len(offered),
            "candidates_not_applying": sum(not c["applies"] for c in offered),
            "edits_losing_the_kernel": sum(c["keeps_kernel"] is False for c in offered),
            "errors": sum(bool(r["error"]) for r in mine),
            "kernels_per_action": dict(Counter(a for r in kernels for a in {c["action"] for c in r["candidates"]})),
        }
    return out


def markdown(rows: list[dict], parts: dict, repos: dict, sources: dict, meta: dict) -> str:
    head = ("| {} | files | kernels | launched in the file | not launched there: device functions / launch found "
            "in another module | any action | structural | structural, launched here | candidates | not applying | errors |")
    lines = ["# Actions offered on public Triton code", "",
             f"Engine: {meta['engine']}; {meta['date']}; target {meta['target']}; `{meta['command']}`; "
             f"{meta['seconds']:.0f} s on the 2-core CPU machine. Nothing runs a kernel.", "",
             "Repositories (the code stays in the ignored `.public/` folder, never in the repository): " +
             ", ".join(f"{n} {s['commit'][:8]} ({s['date']}, {s['files']} kernel files"
                       f"{', held out' if n in meta['heldout'] else ''})" for n, s in sources.items()) + ".", "",
             "Held-out repositories are surveyed and reported, never read to tune the engine. "
             "'Launched in the file': the analysis found a launch of the kernel in the same file; library kernels "
             "launched from another module can get kernel-body actions only. Of the kernels not launched in their "
             "file: device functions (a @triton.jit function another kernel of the file calls, never launched) and "
             "those whose launch the analysis finds in a module that imports them (optimizer/analysis/workspace.py; "
             "the checks and compile diagnostics use its values, and such kernels get only interface-keeping steps).", "",
             head.format("part"), "|---|" + "---:|" * 10]

    def row_of(name: str, s: dict) -> str:
        return (f"| {name} | {s['files']} | {s['kernels']} | {pct(s['launched_here'], s['kernels'])} | "
                f"{s['device_functions']} / {s['launched_elsewhere']} of {s['kernels'] - s['launched_here']} | "
                f"{pct(s['with_any_action'], s['kernels'])} | {pct(s['with_structural_action'], s['kernels'])} | "
                f"{pct(s['structural_when_launched_here'], s['launched_here'])} | {s['candidates']} | "
                f"{s['candidates_not_applying']} | {s['errors']} |")

    lines += [row_of(n, s) for n, s in parts.items()]
    lines += ["", head.format("repository"), "|---|" + "---:|" * 10]
    lines += [row_of(n, s) for n, s in repos.items() if n != "all"]
    lines += ["", "Kernels offered each action:", "", "| action | " + " | ".join(parts) + " |", "|---|" + "---:|" * len(parts)]
    for action in ACTIONS:
        lines.append(f"| {action} | " + " | ".join(pct(s["kernels_per_action"].get(action, 0), s["kernels"])
                                               for s in parts.values()) + " |")
    failures = Counter((c["action"], (c["apply_error"] or "")[:120]) for r in rows if r["kernel"] for c in r["candidates"]
                       if not c["applies"])
    errors = Counter((r["error"] or "")[:120] for r in rows if r["error"])
    dev = [r for r in rows if r["kernel"] and r["part"] != "heldout"]  # held-out repositories are not read
    for action in ("tiling", "rows_per_program"):
        lines += refusal_table(dev, action)
    if failures:
        lines += ["", "Candidates offered that did not apply (engine bugs to fix):", "", "| action | error | count |",
                  "|---|---|---:|"]
        lines += [f"| {a} | {e.replace('|', '/')} | {n} |" for (a, e), n in failures.most_common(20)]
    if errors:
        lines += ["", "Files or kernels the engine failed on:", "", "| error | count |", "|---|---:|"]
        lines += [f"| {e.replace('|', '/')} | {n} |" for e, n in errors.most_common(20)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", nargs=2, action="append", metavar=("GIT_DIR", "NAME"),
                        help="copy a repository's Python files into .public/NAME (repeatable), then stop")
    parser.add_argument("--heldout", action="append", default=[], help="a repository of the held-out part (repeatable)")
    parser.add_argument("--sample", type=int, default=0, help="at most this many files per repository (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default="h100")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "public"))
    args = parser.parse_args(argv)
    if args.extract:
        for git_dir, name in args.extract:
            print(f"{name}: {extract(git_dir, name)} kernel files", file=sys.stderr)
        return 0
    sources = json.loads((PUBLIC / SOURCES).read_text()) if (PUBLIC / SOURCES).is_file() else {}
    if not sources:
        print(f"nothing to survey: extract repositories into {PUBLIC} first (--extract GIT_DIR NAME)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    target = get_profile(args.target)
    rows = []
    for repo in sorted(sources):
        files = sampled_files(repo, args.sample, args.seed)
        part = "heldout" if repo in args.heldout else "dev"
        for path in files:
            rows += survey_file(path, repo, part, target)
        print(f"{repo}: {len(files)} files surveyed", file=sys.stderr)
    parts, repos = summarize(rows, "part"), summarize(rows, "repo")
    command = "python benchmarks/public_survey.py" + "".join(f" --heldout {h}" for h in args.heldout) + \
        (f" --sample {args.sample} --seed {args.seed}" if args.sample else "") + f" --target {args.target}"
    meta = {"engine": engine_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "target": args.target,
            "command": command, "seconds": time.perf_counter() - start, "heldout": args.heldout}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "survey.md").write_text(markdown(rows, parts, repos, sources, meta))
    (out / "survey.json").write_text(json.dumps({**meta, "sources": sources, "parts": parts, "repos": repos,
                                                 "kernels": rows}, indent=1) + "\n")
    s = parts["all"]
    print(f"{s['kernels']} kernels in {s['files']} files: structural {pct(s['with_structural_action'], s['kernels'])}, "
          f"launched here {pct(s['launched_here'], s['kernels'])}; {meta['seconds']:.0f} s -> {out / 'survey.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
