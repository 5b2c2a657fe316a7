"""Soak: thousands of incremental edits with verification jobs streaming; latency percentiles and RSS over time.

A real server (``create_server()``) runs in a thread of this process over pipes, driven by the byte-level
test client (tests/lsp/raw_client.py) so that the server's own document text can be compared with the
client's at the end. Each edit is an incremental change near a kernel (a comment line typed, then
deleted); every ``--probe-every`` edits a hover and a code action are timed (request -> response);
every ``--verify-every`` edits ``mtmc.verifyKernel`` starts a verification (Triton interpreter workers)
that runs while the edits go on; every ``--garbage-every`` edits a broken frame is sent. RSS of the
process (client included, the verification workers not) is sampled every ``--sample-every`` edits.

Checks at the end ("nothing lost"): the server's text and version equal the client's, every request
got an answer, the last diagnostics carry the last version, the server still answers.

    python benchmarks/soak.py --edits 10000 --out benchmarks/results/reliability
    python benchmarks/soak.py --edits 300 --verify-every 100   # the CI size (tests/lsp/test_soak.py)

``--close-rounds N`` measures instead what closing a big file gives back: a server in its own process
(RSS of the server alone), a small file opened and closed first (the lazily imported checks and
actions: the warm idle), then N rounds of opening a ~1 MB file, editing inside one of its kernels,
waiting for the last diagnostics and closing it; RSS after each close (``close.json``, ``close.md``).

    python benchmarks/soak.py --close-rounds 3 --out benchmarks/results/reliability
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from lsp.raw_client import RawClient  # noqa: E402

MATMUL = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()


def rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def run(edits: int, verify_every: int, probe_every: int, sample_every: int, garbage_every: int,
        debounce_ms: int, seed: int, rate: float = 0.0, burst: int = 20, pause_ms: float = 0.0) -> dict:
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="mtmc-soak-"))
    settings = {"targetGpu": "h100", "diagnosticsDebounceMs": debounce_ms, "compileDiagnostics": False,
                "policy": "heuristic", "trusted": True,
                "verification": {"enabled": True, "seeds": 1, "compileTimeoutS": 120, "runTimeoutS": 120}}
    client = RawClient.in_process(settings)
    client.initialize(root)
    uri = (root / "matmul.py").as_uri()
    (root / "matmul.py").write_text(MATMUL)
    client.open(uri, MATMUL)
    kernel_line = next(i for i, line in enumerate(MATMUL.splitlines()) if line.startswith("def matmul_kernel"))
    latencies: dict[str, list[float]] = {"hover": [], "codeAction": []}
    rss_curve: list[dict] = []
    verify_ids: list[int] = []
    started = time.perf_counter()
    typed: list[int] = []  # lines holding a typed comment, to delete later
    idle_rss = rss_mb()
    garbage_sent = 0

    for i in range(1, edits + 1):
        if rate:
            time.sleep(1 / rate)  # typing speed
        if pause_ms and i % burst == 0:
            time.sleep(pause_ms / 1000)  # a pause in typing: the debounced diagnostics run
        text, _ = client.buffers[uri]
        lines = text.split("\n")
        if typed and (rng.random() < 0.5 or len(typed) > 20):
            line = typed.pop(rng.randrange(len(typed)))
            client.change(uri, (line, 0), (line + 1, 0), "")
            typed = [t - 1 if t > line else t for t in typed]
        else:
            line = rng.randrange(kernel_line + 2, len(lines) - 1)
            client.change(uri, (line, 0), (line, 0), f"    # soak edit {i} é😀\n")
            typed = [t + 1 if t >= line else t for t in typed] + [line]
        if i % probe_every == 0:
            position = {"line": kernel_line, "character": 6}
            t0 = time.perf_counter()
            reply = client.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": position})
            latencies["hover"].append(time.perf_counter() - t0)
            assert "result" in reply, reply
            t0 = time.perf_counter()
            reply = client.call("textDocument/codeAction", {
                "textDocument": {"uri": uri}, "context": {"diagnostics": []},
                "range": {"start": position, "end": position}})
            latencies["codeAction"].append(time.perf_counter() - t0)
            assert "result" in reply, reply
        if verify_every and i % verify_every == 0:
            verify_ids.append(client.request("workspace/executeCommand",
                                             {"command": "mtmc.verifyKernel", "arguments": [uri, "matmul_kernel"]}))
        if garbage_every and i % garbage_every == 0:
            client.send_raw(b"Content-Length: 7\r\n\r\n{broken" if garbage_sent % 2 else b"\x00junk between frames\r\n")
            garbage_sent += 1
        if i % sample_every == 0 or i == edits:
            rss_curve.append({"edits": i, "seconds": round(time.perf_counter() - started, 2), "rss_mb": round(rss_mb(), 1)})
    edit_seconds = time.perf_counter() - started

    # Nothing lost: every verification answered, the last diagnostics are for the last version.
    verifications = []
    for msg_id in verify_ids:
        reply = client.wait(msg_id, timeout=600)
        verifications.append((reply.get("result") or {}).get("status") or reply.get("error", {}).get("message"))
    final_text, final_version = client.buffers[uri]
    client.wait_for(lambda: any(n["method"] == "textDocument/publishDiagnostics" and n["params"].get("uri") == uri
                                and n["params"].get("version") == final_version for n in client.notifications), 30)
    document = client.server.workspace.get_text_document(uri)
    result = {
        "edits": edits, "seconds": round(edit_seconds, 1), "edits_per_s": round(edits / edit_seconds, 1),
        "probes": len(latencies["hover"]),
        "latency_ms": {method: {"p50": round(percentile(v, 50) * 1e3, 2), "p95": round(percentile(v, 95) * 1e3, 2),
                               "p99": round(percentile(v, 99) * 1e3, 2), "max": round(max(v, default=float("nan")) * 1e3, 2),
                               "mean": round(statistics.fmean(v) * 1e3, 2) if v else None}
                       for method, v in latencies.items()},
        "verifications": {"started": len(verify_ids), "answered": len(verifications),
                          "statuses": {s: verifications.count(s) for s in set(map(str, verifications))}},
        "broken_frames_sent": garbage_sent,
        "typing": {"edits_per_s": rate or None, "burst": burst, "pause_ms": pause_ms, "debounce_ms": debounce_ms},
        "diagnostics_published": sum(n["method"] == "textDocument/publishDiagnostics" and n["params"].get("uri") == uri
                                     for n in client.notifications),
        "framing_problems_seen": client.server.protocol.problems,
        "text_equal": document.source == final_text, "version_equal": document.version == final_version,
        "last_diagnostics_version": max((n["params"].get("version") or 0 for n in client.notifications
                                         if n["method"] == "textDocument/publishDiagnostics"
                                         and n["params"].get("uri") == uri), default=None),
        "final_version": final_version,
        "alive": client.alive(),
        "rss_idle_mb": round(idle_rss, 1), "rss_curve": rss_curve,
        "python": sys.version.split()[0], "cpus": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    client.close()
    return result


def _server_rss_mb(client: RawClient) -> float:
    with open(f"/proc/{client.process.pid}/status") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))


def _settle(client: RawClient, seconds: float = 20.0) -> float:
    """RSS once it stops falling (the close's gc and malloc_trim run in the analysis thread)."""
    deadline, last = time.monotonic() + seconds, _server_rss_mb(client)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _server_rss_mb(client)
        if now >= last - 0.5:
            return now
        last = now
    return last


def close_rounds(rounds: int, size_bytes: int = 1_000_000, edits: int = 3) -> dict:
    """RSS of a server process: idle, warm idle, and after each close of a big, edited file."""
    root = Path(tempfile.mkdtemp(prefix="mtmc-close-"))
    client = RawClient.subprocess(cwd=root, settings={"targetGpu": "h100", "compileDiagnostics": False,
                                                      "policy": "heuristic", "diagnosticsDebounceMs": 50})
    client.initialize(root)
    time.sleep(1.0)
    idle = _server_rss_mb(client)
    small = (root / "small.py").as_uri()
    client.open(small, MATMUL)
    client.wait_for(lambda: any(n["method"] == "textDocument/publishDiagnostics" and n["params"]["uri"] == small
                                for n in client.notifications), 60)
    client.close_document(small)
    warm = _settle(client)
    text = (MATMUL + "\n") * (size_bytes // len(MATMUL))
    body_line = next(i for i, line in enumerate(MATMUL.splitlines()) if line.startswith("def matmul_kernel")) + 2
    rows = []
    for round_index in range(rounds):
        uri = (root / f"big{round_index}.py").as_uri()
        client.open(uri, text)
        version = 1
        for i in range(edits):  # a different kernel source each time: new entries in the checks' caches
            version = client.change(uri, (body_line, 0), (body_line, 0), f"    # edit {round_index}.{i}\n")
            client.wait_for(lambda v=version: any(n["method"] == "textDocument/publishDiagnostics"
                                                  and n["params"].get("uri") == uri
                                                  and n["params"].get("version") == v for n in client.notifications), 120)
        peak = _server_rss_mb(client)
        client.close_document(uri)
        rows.append({"round": round_index + 1, "peak_mb": round(peak, 1), "after_close_mb": round(_settle(client), 1)})
    result = {"idle_mb": round(idle, 1), "warm_idle_mb": round(warm, 1), "file_bytes": len(text), "edits": edits,
              "rounds": rows, "alive": client.alive(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
              "load_avg": [round(x, 2) for x in os.getloadavg()]}
    client.close()
    return result


def close_report(result: dict) -> str:
    rows = "\n".join(f"| {r['round']} | {r['peak_mb']} | {r['after_close_mb']} |" for r in result["rounds"])
    return f"""## Closing a big file: RSS of the server process

A {result['file_bytes']:,}-byte file (the matmul example repeated), {result['edits']} edits inside one kernel
(each analysed), then closed; allocator {result.get('pythonmalloc', 'malloc')}; load average
{result['load_avg']} on {result['cpus']} CPUs. Idle after initialize:
{result['idle_mb']} MB; warm idle (a small file opened and closed: the checks and actions imported):
{result['warm_idle_mb']} MB.

| round | peak MB | after close MB |
|---:|---:|---:|
{rows}
"""


def report(result: dict) -> str:
    lat = result["latency_ms"]
    rows = "\n".join(f"| {m} | {v['p50']} | {v['p95']} | {v['p99']} | {v['max']} |" for m, v in lat.items())
    curve = "\n".join(f"| {p['edits']} | {p['seconds']} | {p['rss_mb']} |" for p in result["rss_curve"])
    return f"""## Soak: {result['edits']} incremental edits, verification streaming

{result['edits']} edits in {result['seconds']} s ({result['edits_per_s']} edits/s; typing {result['typing']};
load average {result['load_avg']} on {result['cpus']} CPUs); {result['diagnostics_published']} diagnostics
published. {result['probes']} probes of each request below (request -> response, while the edits and
verifications go on):

| request | p50 ms | p95 ms | p99 ms | max ms |
|---|---:|---:|---:|---:|
{rows}

Verifications started/answered: {result['verifications']['started']}/{result['verifications']['answered']}
({result['verifications']['statuses']}). Broken frames sent: {result['broken_frames_sent']}; framing problems
the server reported: {result['framing_problems_seen']}.

Nothing lost: server text equals the client's: {result['text_equal']}; versions equal: {result['version_equal']}
(final {result['final_version']}, last diagnostics for version {result['last_diagnostics_version']}); server still
answers: {result['alive']}.

RSS of the process (server and client; idle after initialize {result['rss_idle_mb']} MB):

| edits | seconds | RSS MB |
|---:|---:|---:|
{curve}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=10_000)
    parser.add_argument("--verify-every", type=int, default=1000)
    parser.add_argument("--probe-every", type=int, default=10)
    parser.add_argument("--sample-every", type=int, default=500)
    parser.add_argument("--garbage-every", type=int, default=250)
    parser.add_argument("--debounce-ms", type=int, default=200, help="the editor setting (200 is the default)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--rate", type=float, default=60.0, help="edits per second while typing (0: no pacing)")
    parser.add_argument("--burst", type=int, default=20, help="edits between pauses")
    parser.add_argument("--pause-ms", type=float, default=400.0, help="pause after each burst (diagnostics run)")
    parser.add_argument("--out", type=Path, default=None, help="folder for soak.json and soak.md")
    parser.add_argument("--close-rounds", type=int, default=0,
                        help="measure RSS after closing a ~1 MB file this many times instead of the soak")
    parser.add_argument("--close-edits", type=int, default=3, help="edits inside a kernel before each close")
    args = parser.parse_args()
    if args.close_rounds:
        result = close_rounds(args.close_rounds, edits=args.close_edits)
        # `mtmc serve` restarts itself under PYTHONMALLOC=malloc unless the environment names an allocator.
        result["pythonmalloc"] = os.environ.get("PYTHONMALLOC", "malloc (mtmc serve's default)")
        text = close_report(result)
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "close.json").write_text(json.dumps(result, indent=1) + "\n")
            (args.out / "close.md").write_text(text)
        sys.exit(0 if result["alive"] else 1)
    result = run(args.edits, args.verify_every, args.probe_every, args.sample_every, args.garbage_every,
                 args.debounce_ms, args.seed, args.rate, args.burst, args.pause_ms)
    text = report(result)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "soak.md").write_text(text)
    ok = result["text_equal"] and result["version_equal"] and result["alive"] and \
        result["verifications"]["answered"] == result["verifications"]["started"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
