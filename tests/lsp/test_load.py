"""Big documents over real stdio (issue 16, item 6): a 5 MB line stays responsive, closing a big file gives memory back."""

from __future__ import annotations

import time

from .raw_client import REPO, RawClient

MATMUL = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()


def _rss_mb(client: RawClient) -> float:
    with open(f"/proc/{client.process.pid}/status") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))


def test_edits_on_a_5_mb_single_line_file_answer_in_milliseconds(server):
    uri = (server.root / "big.py").as_uri()
    server.open(uri, "x = [" + "1, " * 1_700_000 + "]")
    assert server.alive()
    latencies = []
    for i in range(20):
        server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": i + 2}, "contentChanges": [
            {"range": {"start": {"line": 0, "character": 4_000_000 + i}, "end": {"line": 0, "character": 4_000_001 + i}},
             "text": "2"}]})
        started = time.perf_counter()
        reply = server.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 3}})
        latencies.append(time.perf_counter() - started)
        assert "result" in reply
    latencies.sort()
    # Each edit took about 2.25 s of the event loop before (pygls' per-character position loop).
    assert latencies[len(latencies) // 2] < 0.1 and latencies[-1] < 1.0, latencies
    skipped = [n for n in server.notifications if n["method"] == "window/logMessage" and "MB" in n["params"]["message"]]
    assert skipped, "the document is declared too large to analyse"


def test_closing_a_1_mb_file_gives_most_memory_back(server):
    idle = _rss_mb(server)
    uri = (server.root / "mid.py").as_uri()
    server.open(uri, (MATMUL + "\n") * (1_000_000 // len(MATMUL)))
    for i in range(3):
        server.change(uri, (i, 0), (i, 0), "# x\n")
    assert server.wait_for(lambda: any(n["method"] == "textDocument/publishDiagnostics"
                                       and n["params"].get("version") == 4 for n in server.notifications), 120)
    peak = _rss_mb(server)
    server.close_document(uri)
    assert server.alive()
    deadline = time.monotonic() + 20
    while _rss_mb(server) - idle > 0.45 * (peak - idle) and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _rss_mb(server)
    # Measured: idle 44, peak 262, after close 98 MB (it stayed at the peak before).
    assert after - idle <= 0.45 * (peak - idle), (idle, peak, after)
