"""The KernelBench report: per-level scores, a per-problem table, and a speedup plot per level."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .evaluate import ProblemResult, iter_rows, summarize


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_markdown(rows: list[ProblemResult], meta: dict) -> str:
    """report.md: how it was run, the scores per level, then every problem."""
    summary = summarize(rows)
    lines = ["# KernelBench results", ""]
    for key, value in meta.items():
        lines.append(f"- {key}: {value}")
    lines += ["", "fast_p: the fraction of all problems that are correct and more than p times faster than the "
              "baseline (incorrect problems count as not fast; fast_0 is correctness). Mean speedups are over "
              "the correct, timed problems. 'fully Triton': no op left as a PyTorch call. 'TF32-off reference': "
              "correct against Model run with TF32 off (PyTorch's cuDNN convolutions use TF32 by default and "
              "KernelBench's eval keeps that default; its 1e-4 then measures the reference's own TF32 error).", ""]
    for level, entry in summary.items():
        lines += [f"## {level}", "",
                  f"{entry['problems']} problems: {entry['correct']} correct "
                  f"({'-' if entry.get('correct_fp32_reference') is None else entry['correct_fp32_reference']} "
                  "against the TF32-off reference), "
                  f"{entry['fully_triton']} fully Triton, "
                  f"{entry['with_pytorch_ops']} with PyTorch ops left, {entry['errors']} errors.", "",
                  "| subset | baseline | correct | fast_1 | fast_2 | mean speedup | geomean | timed |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        labels = {"all": "all", "fully_triton_only": "fully Triton", "all_fp32_reference": "all, TF32-off reference"}
        for subset in [name for name in labels if name in entry]:
            for baseline in ("eager", "compile"):
                s = entry[subset][baseline]
                name = "torch.compile" if baseline == "compile" else "eager"
                lines.append(f"| {labels[subset]} | {name} | {_pct(s['fast_0'])} | {_pct(s['fast_1'])} | "
                             f"{_pct(s['fast_2'])} | {_x(s['mean_speedup'])} | {_x(s['geomean_speedup'])} | {s['timed']} |")
        lines.append("")
    lines += ["## Problems", "",
              "| problem | status | correct | vs TF32-off ref | eager ms | compile ms | Triton ms | x eager | x compile "
              "| kernels | PyTorch ops left |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in iter_rows(rows):
        left = ", ".join(sorted(set(r.torch_ops))) or "-"
        status = r.status if not r.static_errors else "static: " + "; ".join(r.static_errors)
        strict = "-" if r.reference_tf32_max_diff is None else (
            f"{r.trials_passed_fp32_reference}/{r.trials} (refs differ {r.reference_tf32_max_diff:.1e})")
        # a row right only against the TF32-off reference still shows its speed, marked with *
        mark = "" if r.correct or not r.correct_fp32_reference else "*"
        eager, compiled = (_x(x) + (mark if x is not None else "") for x in
                           (r.speedup(b, "kernelbench" if r.correct else "fp32") for b in ("eager", "compile")))
        lines.append(f"| {r.key} | {status} | {r.trials_passed}/{r.trials} | {strict} | {_ms(r.eager_ms)} | "
                     f"{_ms(r.compile_ms)} | {_ms(r.triton_ms)} | {eager} | {compiled} | {len(r.kernels)} | "
                     f"{left} |")
    errors = [r for r in iter_rows(rows) if r.error and not r.correct]
    if errors:
        lines += ["", "## Failures", ""]
        lines += [f"- {r.key}: {r.error.splitlines()[0][:300] if r.error else ''}" for r in errors]
    return "\n".join(lines) + "\n"


def plot(rows: list[ProblemResult], out_dir: Path) -> list[Path]:
    """speedup_levelN.png: log-scale speedup over eager and torch.compile per correct problem."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for level in sorted({r.level for r in rows}):
        timed = [r for r in iter_rows(rows) if r.level == level and r.speedup("eager") is not None]
        if not timed:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 0.25 * len(timed)), 4))
        xs = range(len(timed))
        ax.bar([x - 0.2 for x in xs], [r.speedup("eager") for r in timed], width=0.4, label="x eager")
        ax.bar([x + 0.2 for x in xs], [r.speedup("compile") or math.nan for r in timed], width=0.4, label="x torch.compile")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r.name.split("_")[0] for r in timed], rotation=90, fontsize=6)
        ax.set_ylabel("speedup (log)")
        ax.set_title(f"KernelBench level {level}: generated Triton vs PyTorch")
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"speedup_level{level}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def write_report(rows: list[ProblemResult], out_dir: Path, meta: dict) -> dict:
    """summary.json, report.md and the plots under ``out_dir``; returns the summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    (out_dir / "summary.json").write_text(json.dumps({"meta": meta, "levels": summary}, indent=2), encoding="utf-8")
    (out_dir / "report.md").write_text(render_markdown(rows, meta), encoding="utf-8")
    plot(rows, out_dir)
    return summary
