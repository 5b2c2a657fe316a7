#!/usr/bin/env python3
"""Turn a bench ``results.json`` into ``report.md`` and PNG plots beside it (or in --out).

``python3 benchmarks/report.py benchmarks/results/h200/results.json`` regenerates everything:
the markdown table (always) and, when matplotlib imports, ``speedup.png`` (the optimized kernel's
speedup over naive, eager and torch.compile), ``roofline.png`` (every variant placed under the
measured roofs) and ``floor.png`` (each variant's share of its floor).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

VARIANT_LABELS = {
    "naive": "naive Triton", "mtmc": "MTMC-optimized", "eager": "PyTorch eager",
    "compile": "torch.compile", "compile_max_autotune": "torch.compile max-autotune",
}
VARIANT_STYLE = {  # marker, colour: the same in every plot
    "naive": ("o", "#9e9e9e"), "mtmc": ("*", "#d62728"), "eager": ("s", "#1f77b4"),
    "compile": ("^", "#2ca02c"), "compile_max_autotune": ("v", "#9467bd"),
}
SPEEDUP_BARS = (("over_naive", "over naive Triton"), ("over_eager", "over PyTorch eager"),
                ("over_best_compile", "over best torch.compile"))


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    if data.get("mode") == "cpu-smoke":
        raise ValueError(f"{path} is a --cpu-smoke result (no timings): nothing to report")
    return data


def _ms(v: dict | None) -> str:
    if not v:
        return "-"
    if v.get("ms") is not None:
        return f"{v['ms']:.3f}"
    if v.get("skipped"):
        return "skipped"
    if v.get("error") or v.get("correct") is False:
        return "FAILED"
    return "-"


def _x(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _display_path(path: str | None) -> str:
    """The results path as the repository sees it (runs elsewhere write absolute paths of that machine)."""
    if not path:
        return "results.json"
    resolved = Path(path).resolve()
    root = Path(__file__).resolve().parents[1]
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else "<folder>/results.json"


def markdown(results: dict, images: list[str]) -> str:
    env = results.get("environment", {})
    c = results.get("ceilings", {})
    s = results.get("summary", {})
    settings = results.get("settings", {})
    opt = results.get("optimizer", {})
    lines = [
        f"# Benchmarks: {env.get('gpu', results.get('device', '?'))}",
        "",
        f"Run {env.get('date', '?')}: {env.get('gpu', '?')} (driver {env.get('driver', '?')}), "
        f"torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, CUDA {env.get('cuda', '?')}, "
        f"Python {env.get('python', '?')}" + (f"; engine {env['engine']}." if env.get("engine") else "."),
        f"Ceilings measured in the same run: device-to-device copy **{c.get('copy_gbs', 0):,.0f} GB/s** "
        f"(read + write), {c.get('matmul_dtype', 'bf16')} matmul {c.get('matmul_shape')} "
        f"**{c.get('matmul_tflops', 0):,.0f} TFLOP/s**. Floor = max(bytes moved once / copy bandwidth, "
        "FLOPs / matmul rate).",
        f"Optimizer: method `{opt.get('method', '?')}`, policy `{settings.get('policy', '?')}`, "
        f"step budget {settings.get('steps', '?')}"
        + (f" ({opt['note']})" if opt.get("note") else "") + ". "
        + (f"The max-autotune variant is `torch.compile(mode=\"{settings['max_autotune_mode']}\")`. "
           if settings.get("max_autotune_mode") else "")
        + f"Timing: `triton.testing.do_bench` medians (L2 flushed), variants interleaved over "
        f"{settings.get('rounds', '?')} rounds; noise = (max - min) / median of the rounds.",
        "",
    ]
    if results.get("mode") != "gpu":
        lines += [f"> Mode `{results.get('mode')}`: not a GPU run; times mean nothing.", ""]
    if s:
        t = s.get("targets", {})
        ok = lambda key: "met" if t.get(key) else "not met"  # noqa: E731
        lines += [
            "## Headline",
            "",
            "| geometric mean of the MTMC-optimized kernel's speedup | value | target |",
            "|---|---|---|",
            f"| over the naive start | {_x(s.get('geomean_over_naive'))} | >= 4x: {ok('geomean_over_naive_ge_4')} |",
            f"| over PyTorch eager | {_x(s.get('geomean_over_eager'))} | |",
            f"| over torch.compile (default) | {_x(s.get('geomean_over_compile'))} | |",
            f"| over the better torch.compile mode | {_x(s.get('geomean_over_best_compile'))} | >= 1.0x: "
            f"{ok('geomean_over_compile_ge_1')}; each within 1.25x: {ok('every_kernel_within_1_25x_of_compile')} |",
            f"| memory-bound kernels at >= 70% of floor | "
            + (", ".join(f"{k} {_pct(v)}" for k, v in (s.get("memory_bound_pct_of_floor") or {}).items()) or "none timed")
            + f" | {ok('memory_bound_ge_70pct_of_floor')} |",
            "",
            f"{s.get('timed', 0)} of {s.get('kernels', 0)} kernels timed; optimize loops spent "
            f"{s.get('verifications', 0)} verifications and {s.get('optimize_wall_s', 0):.0f} s; "
            f"the whole run took {results.get('total_wall_s', 0):.0f} s.",
            "",
        ]
    lines += [
        "## Times (ms, median)",
        "",
        "| kernel | class | bound | naive | MTMC | eager | compile | max-autotune | floor | MTMC % of floor "
        "| x naive | x eager | x best compile | noise | verifications | optimize s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in results.get("kernels", []):
        v = k.get("variants", {})
        sp = k.get("speedups", {})
        o = k.get("optimize", {})
        lines.append(
            f"| {k['name']} | {k.get('op_class', '')} | {k.get('bound', '')} | {_ms(v.get('naive'))} | "
            f"{_ms(v.get('mtmc'))} | {_ms(v.get('eager'))} | {_ms(v.get('compile'))} | "
            f"{_ms(v.get('compile_max_autotune'))} | "
            f"{'-' if k.get('floor_ms') is None else format(k['floor_ms'], '.3f')} | "
            f"{_pct(v.get('mtmc', {}).get('pct_of_floor'))} | {_x(sp.get('over_naive'))} | "
            f"{_x(sp.get('over_eager'))} | {_x(sp.get('over_best_compile'))} | "
            f"{'-' if k.get('noise') is None else format(100 * k['noise'], '.1f') + '%'} | "
            f"{o.get('verifications', '-')} | {'-' if o.get('wall_s') is None else format(o['wall_s'], '.0f')} |"
        )
    lines += ["", *[f"![{name}]({name})" for name in images], ""] if images else [""]
    lines += ["## Work per kernel", "", "| kernel | shapes | bytes once | GFLOP | intensity (FLOP/B) | compile s "
              "(default / max-autotune) |", "|---|---|---:|---:|---:|---|"]
    for k in results.get("kernels", []):
        v = k.get("variants", {})
        comp = " / ".join(
            "-" if v.get(n, {}).get("compile_s") is None else f"{v[n]['compile_s']:.1f}"
            for n in ("compile", "compile_max_autotune"))
        lines.append(
            f"| {k['name']} | {' '.join('x'.join(map(str, sh)) for sh in k.get('shapes', []))} | "
            f"{k.get('bytes', 0) / 1e6:,.0f} MB | {k.get('flops', 0) / 1e9:,.1f} | "
            f"{k.get('intensity', 0):.2f} | {comp} |")
    lines += ["", "## Optimization steps", ""]
    for k in results.get("kernels", []):
        o = k.get("optimize", {})
        head = f"- **{k['name']}**: "
        if o.get("skipped"):
            lines.append(head + f"not optimized ({o['skipped']})")
            continue
        if o.get("error"):
            lines.append(head + f"optimizer error: `{o['error'][:200]}`")
            continue
        steps = o.get("steps", [])
        shown = []
        for st in steps:
            if "candidate" not in st:
                continue
            action = st.get("action") or st.get("key") or st["candidate"].get("action")
            status = st.get("status", "?")
            extra = f" {st['speedup']:.2f}x" if isinstance(st.get("speedup"), (int, float)) else ""
            if status not in ("kept", "accepted") and st.get("reason"):
                extra += f" ({st['reason'][:70]})"
            shown.append(f"`{action}` on {st['candidate'].get('kernel')} {status}{extra}")
        stop = o.get("stopped")
        lines.append(head + ("; ".join(shown) or "no step tried") + (f" (stopped: {stop})" if stop else ""))
    problems = []
    for k in results.get("kernels", []):
        if k.get("error"):
            problems.append(f"- {k['name']}: {k['error']}")
        for name, v in k.get("variants", {}).items():
            if v.get("error"):
                problems.append(f"- {k['name']} / {VARIANT_LABELS.get(name, name)}: {v['error'][:300]}")
    if problems:
        lines += ["", "## Failures and skipped variants", "", *problems]
    lines += ["", "## Correctness", "",
              "Every variant was checked against a higher-precision reference (float64, float32 for half-precision "
              "matmuls) on two fresh random input sets, with NaN-poisoned allocator blocks and an input-mutation "
              "check, before it was timed. Largest relative L2 error per variant:", "",
              "| kernel | tolerance | " + " | ".join(VARIANT_LABELS[n] for n in VARIANT_LABELS) + " |",
              "|---|---:|" + "---:|" * len(VARIANT_LABELS)]
    for k in results.get("kernels", []):
        v = k.get("variants", {})
        cells = []
        for n in VARIANT_LABELS:
            e = v.get(n, {})
            cells.append("-" if e.get("rel_err") is None else f"{e['rel_err']:.1e}" + ("" if e.get("correct") else " FAIL"))
        lines.append(f"| {k['name']} | {k.get('tolerance', 0):g} | " + " | ".join(cells) + " |")
    lines += ["", f"Regenerate: `python3 benchmarks/report.py {_display_path(results.get('_results_path'))}`", ""]
    return "\n".join(lines)


def plot_speedups(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    kernels = [k for k in results["kernels"] if k.get("speedups")]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(kernels) + 3), 4.8))
    width = 0.8 / len(SPEEDUP_BARS)
    for i, (key, label) in enumerate(SPEEDUP_BARS):
        xs = [j + (i - (len(SPEEDUP_BARS) - 1) / 2) * width for j in range(len(kernels))]
        ys = [k["speedups"].get(key) for k in kernels]
        bars = ax.bar(xs, [y or 0.0 for y in ys], width, label=label)
        for bar, y in zip(bars, ys):
            if y:
                ax.annotate(f"{y:.1f}" if y >= 1 else f"{y:.2f}", (bar.get_x() + bar.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=6, xytext=(0, 1), textcoords="offset points")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    times = ticker.FuncFormatter(lambda v, _: f"{v:g}x")
    ax.yaxis.set_major_formatter(times)
    ax.yaxis.set_minor_formatter(times)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xticks(range(len(kernels)), [k["name"] for k in kernels], rotation=35, ha="right")
    ax.set_ylabel("speedup of the MTMC-optimized kernel (log)")
    ax.set_title(f"MTMC-optimized Triton on {results.get('environment', {}).get('gpu', '?')}")
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_roofline(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    c = results["ceilings"]
    bw, peak = c["copy_gbs"] * 1e9, c["matmul_tflops"] * 1e12
    kernels = [k for k in results["kernels"] if k.get("intensity")]
    fig, ax = plt.subplots(figsize=(9, 6))
    lo = min([k["intensity"] for k in kernels] + [0.1]) / 3
    hi = max([k["intensity"] for k in kernels] + [peak / bw]) * 3
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(bw * x, peak) / 1e12 for x in xs], color="black", linewidth=1.5,
            label=f"roof: {c['copy_gbs']:,.0f} GB/s, {c['matmul_tflops']:,.0f} TFLOP/s")
    seen = set()
    labels = []
    for k in kernels:
        for name, (marker, colour) in VARIANT_STYLE.items():
            ms = k.get("variants", {}).get(name, {}).get("ms")
            if not ms or k["variants"][name].get("same_as"):
                continue
            attained = k["flops"] / (ms * 1e-3) / 1e12
            ax.scatter([k["intensity"]], [attained], marker=marker, color=colour, s=70 if name == "mtmc" else 35,
                       label=None if name in seen else VARIANT_LABELS[name], zorder=3, alpha=0.85)
            seen.add(name)
        ms = k.get("variants", {}).get("mtmc", {}).get("ms") or k.get("variants", {}).get("naive", {}).get("ms")
        if ms:
            labels.append((k["name"], k["intensity"], k["flops"] / (ms * 1e-3) / 1e12))
    # Labels near each other (three kernels sit at exactly 2048 FLOP/B) are pushed apart downwards, in decades.
    placed: list[tuple[float, float]] = []
    for name, x, y in sorted(labels, key=lambda item: -item[2]):
        lx, ly = math.log10(x), math.log10(y)
        while any(abs(lx - px) < 0.45 and abs(ly - py) < 0.07 for px, py in placed):
            ly -= 0.07
        placed.append((lx, ly))
        ax.annotate(name, (x, y), xytext=(x * 1.15, 10 ** ly), fontsize=7, va="center",
                    arrowprops={"arrowstyle": "-", "color": "#bbbbbb", "linewidth": 0.5})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved once)")
    ax.set_ylabel("attained TFLOP/s")
    ax.set_title(f"Roofline, {results.get('environment', {}).get('gpu', '?')} (ceilings measured in the run)")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_floor(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    kernels = [k for k in results["kernels"] if k.get("variants")]
    names = list(VARIANT_LABELS)
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(kernels) + 3), 4.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(kernels))]
        ys = [k["variants"].get(name, {}).get("pct_of_floor") or 0.0 for k in kernels]
        ax.bar(xs, ys, width, label=VARIANT_LABELS[name], color=VARIANT_STYLE[name][1])
    ax.axhline(70, color="black", linewidth=0.8, linestyle="--", label="70% of floor")
    ax.set_xticks(range(len(kernels)), [k["name"] for k in kernels], rotation=35, ha="right")
    ax.set_ylabel("% of the floor (floor time / measured time)")
    ax.set_title("How close each variant gets to its floor")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def generate(results_path: Path, out: Path | None = None) -> list[Path]:
    """Write report.md (and the plots when matplotlib is present); return the files written."""
    results_path = Path(results_path)
    out = Path(out) if out else results_path.parent
    out.mkdir(parents=True, exist_ok=True)
    results = load(results_path)
    results["_results_path"] = str(results_path)
    written: list[Path] = []
    images: list[str] = []
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        print("report: matplotlib is not installed; writing the markdown without plots", file=sys.stderr)
    else:
        for name, fn in (("speedup.png", plot_speedups), ("roofline.png", plot_roofline), ("floor.png", plot_floor)):
            fn(results, out / name)
            written.append(out / name)
            images.append(name)
    report = out / "report.md"
    report.write_text(markdown(results, images))
    return [report, *written]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="results.json written by benchmarks/bench.py")
    parser.add_argument("--out", type=Path, default=None, help="folder for report.md and the plots (default: beside it)")
    args = parser.parse_args(argv)
    try:
        written = generate(args.results, args.out)
    except (OSError, ValueError, KeyError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
