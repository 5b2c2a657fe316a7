"""Language-server latency on a large file: open -> first diagnostics, hover, code lens, idle RSS.

Generates a 2,000-line Triton file with 40 kernels (matmuls, autotuned matmuls, row softmaxes,
fused elementwise kernels, all derived from the bundled examples), starts the real server over
stdio (``python -m mtmc_lsp serve``), drives it with pygls' client and writes
benchmarks/results/server_latency.json and .md. Targets (2-core CPU machine): first diagnostics
p95 < 150 ms, hover and code lens p95 < 30 ms, idle RSS < 250 MB.

    python benchmarks/server_latency.py [--rounds 30] [--hovers 200] [--out benchmarks/results]
        [--baseline GIT_REF [--ab-blocks 4]]

``--baseline`` also runs the server of an earlier commit (its mtmc_lsp/optimizer/server trees,
from ``git archive``) in alternating blocks with the working tree's, so both see the same machine
load: on a shared machine that is the fair way to compare first-diagnostics latency and CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "mtmc_lsp" / "examples"
TARGETS_MS = {"first_diagnostics_p95": 150.0, "hover_p95": 30.0, "code_lens_p95": 30.0}
TARGET_RSS_MB = 250.0
FILE_LINES = 2000
KERNELS = 40

AUTOTUNE = '''@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)
'''


def _example_body(name: str) -> str:
    """The kernels and host functions of a bundled example (no imports, inputs or reference)."""
    text = (EXAMPLES / name).read_text()
    start = text.index("@triton.jit")
    end = text.index("\ndef get_inputs")
    return text[start:end].rstrip() + "\n"


def generate_file(seed: int = 0) -> str:
    """A 2,000-line file with 40 kernels; ``seed`` renames everything so no cache sees it twice."""
    matmul = _example_body("matmul.py")
    softmax = _example_body("softmax.py")
    gelu = _example_body("gelu_bias.py")  # two kernels: scale_bias_kernel and gelu_kernel
    autotuned = AUTOTUNE + matmul.split("\n\n\ndef matmul(")[0] + (
        "\n\n\ndef matmul(a, b):\n    M, K = a.shape\n    _, N = b.shape\n"
        "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"
        "    grid = lambda META: (triton.cdiv(M, META['BLOCK_M']), triton.cdiv(N, META['BLOCK_N']))\n"
        "    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),\n"
        "                        c.stride(0), c.stride(1))\n    return c\n"
    )
    templates = [(matmul, 1), (softmax, 1), (gelu, 2), (autotuned, 1)]
    parts = ['"""Generated for the server latency benchmark."""\n\nimport torch\nimport triton\n'
             'import triton.language as tl\n\n\n']
    kernels = 0
    i = 0
    while kernels < KERNELS:
        body, count = templates[i % len(templates)]
        if kernels + count > KERNELS:
            body, count = templates[0]
        suffix = f"_s{seed}_{i}"
        names = set(re.findall(r"^def (\w+)\(", body, flags=re.M))
        renamed = re.sub(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b", lambda m: m.group(1) + suffix, body)
        if i % 5 == 0:  # a few planted problems, so diagnostics are published, not just empty lists
            renamed = renamed.replace("num_warps=4", "num_warps=6")
        parts.append(renamed + "\n\n")
        kernels += count
        i += 1
    text = "".join(parts)
    lines = text.splitlines()
    filler = 0
    while len(lines) < FILE_LINES:  # pad with plain helpers, as real modules have
        lines += ["", "", f"def helper_{seed}_{filler}(x):", f"    return x * {filler} + 1"][: FILE_LINES - len(lines)]
        filler += 1
    return "\n".join(lines[:FILE_LINES]) + "\n"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2),
            "max": round(max(values), 2), "mean": round(statistics.fmean(values), 2)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_ms(pid: int) -> float:
    """User + system CPU time of a process so far (ms), from /proc: load-independent cost."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import lsprotocol
    import pygls

    from mtmc_lsp import __version__

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": cpu, "cpu_count": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(), "platform": platform.platform(),
        "pygls": getattr(pygls, "__version__", None) or _dist_version("pygls"),
        "lsprotocol": _dist_version("lsprotocol"), "mtmc_lsp": __version__, "commit": commit,
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


async def run(args, server_command: list[str] | None = None) -> dict:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    settings = {"targetGpu": "h100", "compileDiagnostics": bool(args.compile), "diagnosticsDebounceMs": 200}
    client = LanguageClient("mtmc-latency-bench", "1")
    published: dict[str, asyncio.Future] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(params: types.PublishDiagnosticsParams):
        future = published.get(params.uri)
        if future is not None and not future.done():
            future.set_result((time.perf_counter(), len(params.diagnostics)))

    @client.feature(types.WORKSPACE_CONFIGURATION)
    def on_configuration(params: types.ConfigurationParams):
        return [settings if item.section == "mtmc" else None for item in params.items]

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def on_log(params: types.LogMessageParams):
        pass

    @client.feature("mtmc/status")
    def on_status(params):
        pass

    command = server_command or (args.server_command.split() if args.server_command
                                 else [sys.executable, "-m", "mtmc_lsp", "serve"])
    await client.start_io(*command)
    pid = client._server.pid
    capabilities = types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(configuration=True),
        text_document=types.TextDocumentClientCapabilities(
            hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
        ),
    )
    started = time.perf_counter()
    await client.initialize_async(types.InitializeParams(capabilities=capabilities, process_id=os.getpid(),
                                                         root_uri=REPO.as_uri()))
    client.initialized(types.InitializedParams())
    initialize_ms = (time.perf_counter() - started) * 1000
    await asyncio.sleep(0.5)
    rss_start = rss_mb(pid)

    first_diag, diag_counts, cpu_per_open = [], [], []
    load_start = load_average()
    for round_ in range(args.rounds):
        text = generate_file(seed=round_)
        uri = f"file:///bench/latency_{round_}.py"
        published[uri] = asyncio.get_running_loop().create_future()
        cpu_before = cpu_ms(pid)
        sent = time.perf_counter()
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        received, count = await asyncio.wait_for(published[uri], 60)
        first_diag.append((received - sent) * 1000)
        cpu_per_open.append(cpu_ms(pid) - cpu_before)
        diag_counts.append(count)
        if round_ < args.rounds - 1:  # keep the last one open for hovers and lenses
            client.text_document_did_close(types.DidCloseTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=uri)))
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)

    text = generate_file(seed=args.rounds - 1)
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("def ") and "_kernel_" in line]
    rng = random.Random(0)
    hovers, hover_hits = [], 0
    for _ in range(args.hovers):
        line = rng.choice(headers)
        sent = time.perf_counter()
        result = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=6)))
        hovers.append((time.perf_counter() - sent) * 1000)
        hover_hits += result is not None
    lenses, lens_count = [], 0
    for _ in range(args.lenses):
        sent = time.perf_counter()
        result = await client.text_document_code_lens_async(types.CodeLensParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        lenses.append((time.perf_counter() - sent) * 1000)
        lens_count = len(result or [])
    await asyncio.sleep(1.0)
    rss_idle = rss_mb(pid)

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()

    result = {
        "file": {"lines": len(lines), "kernels": len(headers), "chars": len(text)},
        "settings": settings,
        "initialize_ms": round(initialize_ms, 1),
        "first_diagnostics_ms": summary(first_diag),
        "samples": {"first_diagnostics_ms": [round(v, 2) for v in first_diag], "server_cpu_ms_per_open": cpu_per_open},
        "server_cpu_ms_per_open": summary(cpu_per_open),
        "load_average_1min": {"start": load_start, "end": load_average()},
        "diagnostics_per_file": diag_counts[-1] if diag_counts else None,
        "hover_ms": summary(hovers), "hover_hits": hover_hits,
        "code_lens_ms": summary(lenses), "code_lenses": lens_count,
        "rss_mb": {"after_start": round(rss_start, 1), "idle_after_workload": round(rss_idle, 1)},
        "targets": {**TARGETS_MS, "idle_rss_mb": TARGET_RSS_MB},
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    result["meets_targets"] = {
        "first_diagnostics_p95": result["first_diagnostics_ms"]["p95"] < TARGETS_MS["first_diagnostics_p95"],
        "hover_p95": result["hover_ms"]["p95"] < TARGETS_MS["hover_p95"],
        "code_lens_p95": result["code_lens_ms"]["p95"] < TARGETS_MS["code_lens_p95"],
        "idle_rss": rss_idle < TARGET_RSS_MB,
    }
    return result


# Starts `mtmc serve` from an extracted source tree (argv[1]) instead of the installed package.
_TREE_LAUNCHER = """
import importlib.util, runpy, sys
root = sys.argv.pop(1)
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
for name, folder in (("mtmc_lsp", "mtmc_lsp"), ("mtmc_lsp.optimizer", "optimizer"), ("mtmc_lsp.server", "server")):
    spec = importlib.util.spec_from_file_location(name, f"{root}/{folder}/__init__.py",
                                                  submodule_search_locations=[f"{root}/{folder}"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
sys.argv = ["mtmc_lsp", "serve"]
runpy.run_module("mtmc_lsp", run_name="__main__", alter_sys=True)
"""


def baseline_server(ref: str, folder: Path) -> tuple[list[str], str]:
    """The command that serves commit ``ref`` (extracted under ``folder``) and that commit's short hash."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", ref, "mtmc_lsp", "optimizer", "server"], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return [sys.executable, "-c", _TREE_LAUNCHER, str(folder)], commit


async def interleaved(args, baseline: list[str]) -> dict:
    """First diagnostics and CPU per open of this tree's server and the baseline's, in alternating blocks."""
    block = argparse.Namespace(**{**vars(args), "rounds": max(args.rounds // args.ab_blocks, 2), "hovers": 2,
                                  "lenses": 2})
    samples: dict[str, dict[str, list[float]]] = {
        side: {"first": [], "cpu": []} for side in ("current", "baseline")}
    loads = [load_average()]
    for index in range(args.ab_blocks):
        order = ("current", "baseline") if index % 2 == 0 else ("baseline", "current")
        for side in order:
            result = await run(block, baseline if side == "baseline" else None)
            samples[side]["first"] += result["samples"]["first_diagnostics_ms"]
            samples[side]["cpu"] += result["samples"]["server_cpu_ms_per_open"]
    loads.append(load_average())
    return {side: {"first_diagnostics_ms": summary(v["first"]), "server_cpu_ms_per_open": summary(v["cpu"])}
            for side, v in samples.items()} | {"blocks": args.ab_blocks, "load_average_1min": loads}


def markdown(result: dict) -> str:
    m = result["machine"]
    ok = lambda key: "yes" if result["meets_targets"][key] else "**no**"  # noqa: E731
    fd, hv, cl = result["first_diagnostics_ms"], result["hover_ms"], result["code_lens_ms"]
    return "\n".join([
        "# Language-server latency",
        "",
        f"{result['file']['lines']}-line file with {result['file']['kernels']} kernels, real server over stdio "
        f"(`python -m mtmc_lsp serve`), settings {json.dumps(result['settings'])}. Measured {result['date']} on "
        f"{m['cpu']} ({m['usable_cpus']} usable CPUs), Python {m['python']}, pygls {m['pygls']}, "
        f"lsprotocol {m['lsprotocol']}, commit {m['commit']}.",
        "",
        "| metric | p50 | p95 | max | n | target | met |",
        "|---|---|---|---|---|---|---|",
        f"| open -> first diagnostics (ms) | {fd['p50']} | {fd['p95']} | {fd['max']} | {fd['n']} | p95 < 150 | {ok('first_diagnostics_p95')} |",
        f"| hover on a kernel (ms) | {hv['p50']} | {hv['p95']} | {hv['max']} | {hv['n']} | p95 < 30 | {ok('hover_p95')} |",
        f"| code lens, whole file (ms) | {cl['p50']} | {cl['p95']} | {cl['max']} | {cl['n']} | p95 < 30 | {ok('code_lens_p95')} |",
        f"| idle RSS after the workload (MB) | {result['rss_mb']['idle_after_workload']} | | | | < 250 | {ok('idle_rss')} |",
        "",
        f"Server CPU time per open (user + system, from /proc): p50 {result['server_cpu_ms_per_open']['p50']} ms, "
        f"p95 {result['server_cpu_ms_per_open']['p95']} ms. Machine load (1-min average) during the run: "
        f"{result['load_average_1min']['start']} -> {result['load_average_1min']['end']} on "
        f"{m['usable_cpus']} CPUs (the machine is shared; wall times include waiting for a CPU).",
        "",
        f"RSS right after start: {result['rss_mb']['after_start']} MB; initialize round trip "
        f"{result['initialize_ms']} ms; {result['diagnostics_per_file']} diagnostics per file, "
        f"{result['code_lenses']} code lenses, {result['hover_hits']}/{hv['n']} hovers answered.",
        "Every round opens a freshly renamed file, so no per-kernel cache is warm at open.",
        "",
        *_ab_markdown(result.get("ab")),
    ])


def _ab_markdown(ab: dict | None) -> list[str]:
    if not ab:
        return []
    rows = []
    for side, label in (("current", f"this tree ({ab['commit_current']})"), ("baseline", f"baseline {ab['commit_baseline']}")):
        fd, cpu = ab[side]["first_diagnostics_ms"], ab[side]["server_cpu_ms_per_open"]
        rows.append(f"| {label} | {fd['p50']} | {fd['p95']} | {fd['mean']} | {cpu['p50']} | {cpu['p95']} | {cpu['mean']} | {fd['n']} |")
    return [
        f"## Against the baseline, interleaved ({ab['blocks']} alternating blocks per server, load "
        f"{ab['load_average_1min'][0]} -> {ab['load_average_1min'][1]})",
        "",
        "| server | first diagnostics p50 (ms) | p95 | mean | CPU per open p50 (ms) | p95 | mean | n |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "CPU time comes from /proc in clock ticks (10 ms) and grows with contention on a shared machine;",
        "the interleaved blocks let both servers see the same load.",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="files opened (first-diagnostics samples)")
    parser.add_argument("--hovers", type=int, default=200)
    parser.add_argument("--lenses", type=int, default=50)
    parser.add_argument("--compile", action="store_true", help="leave compile diagnostics on (background compiles)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--write-file", metavar="PATH", help="only write the generated 2,000-line file and exit")
    parser.add_argument("--server-command", help="start the server with this command instead (e.g. under a profiler)")
    parser.add_argument("--baseline", metavar="GIT_REF", help="also measure this commit's server, interleaved")
    parser.add_argument("--ab-blocks", type=int, default=4, help="alternating blocks per server with --baseline")
    args = parser.parse_args()
    if args.write_file:
        Path(args.write_file).write_text(generate_file())
        return 0
    result = asyncio.run(run(args))
    if args.baseline:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mtmc-baseline-") as folder:
            command, commit = baseline_server(args.baseline, Path(folder))
            result["ab"] = asyncio.run(interleaved(args, command))
        result["ab"].update(commit_baseline=commit, commit_current=result["machine"]["commit"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "server_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "server_latency.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if all(result["meets_targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
