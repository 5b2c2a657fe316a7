"""Opening a file beside 40 planted large neighbours: its first diagnostics cost one reading budget (issue 33)."""

from __future__ import annotations

import ast
from unittest import mock

from mtmc_lsp.optimizer.analysis import workspace

from .raw_client import RawClient

SETTINGS = {"targetGpu": "h100", "compileDiagnostics": False, "policy": "heuristic", "diagnosticsDebounceMs": 0}
KERNELS = '''import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''
LAUNCHER = '''import triton
from .kernels import scale_kernel


def scale(x):
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
'''


def _plant(folder, count: int, size: int, prefix: str) -> None:
    for index in range(count):
        (folder / f"{prefix}_{index:02d}.py").write_text(LAUNCHER + "x = 1\n" * ((size - len(LAUNCHER)) // 6))


def test_first_diagnostics_read_within_the_budget_and_close_drops_the_cache(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    _plant(tmp_path, 40, 500 * 1024, "big")  # the neighbours: never read
    _plant(tmp_path, 40, 60 * 1024, "ops")  # under the size limit: read and parsed within the budget
    workspace._cache.clear()
    reads: list[int] = []
    parsed: list[int] = []
    real_open, real_parse = open, ast.parse

    def counting_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        reads.append(path)
        return handle

    def counting_parse(source, *args, **kwargs):
        parsed.append(len(source))
        return real_parse(source, *args, **kwargs)

    client = RawClient.in_process(SETTINGS)
    try:
        client.initialize(tmp_path)
        uri = (tmp_path / "kernels.py").as_uri()
        with mock.patch.object(workspace, "open", side_effect=counting_open, create=True), \
                mock.patch.object(workspace.ast, "parse", side_effect=counting_parse):
            client.open(uri, KERNELS)
            assert client.wait_for(lambda: any(
                n["method"] == "textDocument/publishDiagnostics" and n["params"]["uri"] == uri
                for n in client.notifications), 60)
        neighbour_parses = [size for size in parsed if size > len(KERNELS)]
        assert not any("big_" in str(path) for path in reads)
        assert 1 <= len(reads) <= workspace.SCAN_FILES
        assert sum(neighbour_parses) <= workspace.SCAN_PARSED_BYTES
        assert any(key[1] == str(tmp_path / "kernels.py") for key in workspace._cache)
        client.close_document(uri)
        assert client.alive()
        assert not any(key[1] == str(tmp_path / "kernels.py") for key in workspace._cache)
    finally:
        client.close()
