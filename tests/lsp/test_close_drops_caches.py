"""Closing a document drops what the server's caches hold for it (issue 16: RSS back near idle after a close).

The checks' facts cache keeps each analysed kernel's syntax tree, keyed by the kernel's source: every
edited version of a kernel is an entry. After didClose none of the closed document's entries are left,
while another open document's stay; the cache is bounded by the source it holds, not only by count.
"""

from __future__ import annotations

from mtmc_lsp.optimizer.checks import kernel_facts

from .raw_client import REPO, RawClient

MATMUL = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()
SOFTMAX = (REPO / "mtmc_lsp" / "examples" / "softmax.py").read_text()
SETTINGS = {"targetGpu": "h100", "compileDiagnostics": False, "policy": "heuristic", "diagnosticsDebounceMs": 0}


def _published(client: RawClient, uri: str, version: int) -> bool:
    return client.wait_for(lambda: any(
        n["method"] == "textDocument/publishDiagnostics" and n["params"]["uri"] == uri
        and n["params"].get("version") == version for n in client.notifications), 60)


def _cached_sources() -> list[str]:
    with kernel_facts._facts_lock:
        return [key[0] for key in kernel_facts._facts_cache]


def test_a_closed_documents_kernel_facts_leave_the_cache_and_an_open_ones_stay(tmp_path):
    kernel_facts.clear_facts_cache()
    client = RawClient.in_process(SETTINGS)
    try:
        client.initialize(tmp_path)
        edited, kept = (tmp_path / "matmul.py").as_uri(), (tmp_path / "softmax.py").as_uri()
        client.open(kept, SOFTMAX)
        client.open(edited, MATMUL)
        assert _published(client, kept, 1) and _published(client, edited, 1)
        body = next(i for i, line in enumerate(MATMUL.splitlines()) if line.startswith("def matmul_kernel")) + 2
        for n in range(3):  # three more versions of the kernel: three more entries
            version = client.change(edited, (body, 0), (body, 0), f"    # edit {n}\n")
            assert _published(client, edited, version)
        assert sum("matmul_kernel" in source for source in _cached_sources()) >= 4
        softmax_entries = [source for source in _cached_sources() if "def softmax" in source]
        assert softmax_entries

        client.close_document(edited)
        assert client.alive()
        assert not [source for source in _cached_sources() if "matmul_kernel" in source]
        assert [source for source in _cached_sources() if "def softmax" in source] == softmax_entries
        state = client.server.documents.get(kept)
        assert state is not None and state.kernel_sources  # the open document still knows its kernels
        assert client.server.documents.get(edited) is None
    finally:
        client.close()


def test_the_facts_cache_is_bounded_by_the_source_it_holds(monkeypatch):
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.checks import run_checks
    from mtmc_lsp.optimizer.hardware import get_profile

    kernel_facts.clear_facts_cache()
    versions = [MATMUL.replace("def matmul_kernel(\n", f"def matmul_kernel(  # version {n}\n", 1) for n in range(8)]
    analysis = analyze(versions[0])
    one = len(kernel_facts.cached_source(analysis.text, analysis.kernel("matmul_kernel")))
    monkeypatch.setattr(kernel_facts, "FACTS_CACHE_CHARS", int(2.5 * one))
    for text in versions:  # eight sources of one kernel: room for two
        run_checks(analyze(text), get_profile("h100"))
    entries, chars = kernel_facts.facts_cache_usage()
    assert entries == 2 and chars <= 2.5 * one
    assert chars == sum(len(source) for source in _cached_sources())
    assert "version 7" in _cached_sources()[-1]  # the newest stays
    kernel_facts.clear_facts_cache()
    assert kernel_facts.facts_cache_usage() == (0, 0)
