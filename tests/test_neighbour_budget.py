"""Neighbour files are read within a budget: planted large files cannot hold the first diagnostics (issue 33)."""

from __future__ import annotations

import ast
from pathlib import Path
from unittest import mock

import pytest

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.analysis import workspace
from mtmc_lsp.optimizer.analysis.workspace import (
    MAX_BYTES, SCAN_BYTES, SCAN_FILES, SCAN_PARSED_BYTES, find_foreign_launches, forget_neighbours,
    with_foreign_launches)

KERNELS = '''import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''

# A neighbour that passes every cheap test (imports the module, launches the kernel), padded to a size.
LAUNCHER = '''import triton
from .kernels import scale_kernel


def scale(x):
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
'''


def _planted(size: int) -> str:
    padding = ("#" * 99 + "\n") * ((size - len(LAUNCHER)) // 100)  # comments: cheap to parse, same bytes to read
    return LAUNCHER + padding


@pytest.fixture(autouse=True)
def _empty_cache():
    workspace._cache.clear()
    yield
    workspace._cache.clear()


def _folder(tmp_path: Path, count: int, size: int) -> Path:
    kernels = tmp_path / "kernels.py"
    kernels.write_text(KERNELS)
    for index in range(count):
        (tmp_path / f"ops_{index:02d}.py").write_text(_planted(size))
    return kernels


def _parsed_sizes(run) -> list[int]:
    """Run ``run()`` and return the size of every text ``ast.parse`` got from the neighbour search."""
    sizes: list[int] = []
    parse = ast.parse

    def counting_parse(source, *args, **kwargs):
        sizes.append(len(source))
        return parse(source, *args, **kwargs)

    with mock.patch.object(workspace.ast, "parse", side_effect=counting_parse):
        run()
    return sizes


def test_forty_neighbours_of_500_kb_are_never_read(tmp_path):
    kernels = _folder(tmp_path, 40, 500 * 1024)
    analysis = analyze(KERNELS, str(kernels))
    found, budget = [], None

    def search():
        nonlocal found, budget
        found, budget = find_foreign_launches(kernels, analysis.kernels)

    assert _parsed_sizes(search) == []
    assert budget.files_read == 0 and budget.bytes_read == 0 and budget.skipped_large == 40
    assert found == []


def test_forty_neighbours_under_the_size_limit_cost_one_budget_per_search(tmp_path):
    size = 60 * 1024
    assert size <= MAX_BYTES
    kernels = _folder(tmp_path, 40, size)
    analysis = analyze(KERNELS, str(kernels))
    results = []
    parsed = _parsed_sizes(lambda: results.append(find_foreign_launches(kernels, analysis.kernels)))
    found, budget = results[0]
    assert budget.files_read <= SCAN_FILES and budget.bytes_read <= SCAN_BYTES
    assert sum(parsed) <= SCAN_PARSED_BYTES and len(parsed) == budget.files_parsed >= 1
    assert budget.left_for_later > 0 and len(found) == budget.files_parsed  # what was parsed was used
    # Later searches (each edit) go on with the files left; the parsed ones come from the cache.
    for _ in range(60):
        found, budget = find_foreign_launches(kernels, analysis.kernels)
        if not budget.left_for_later:
            break
        assert budget.bytes_read <= SCAN_BYTES and budget.bytes_parsed <= SCAN_PARSED_BYTES
    assert len(found) == 40 and {Path(l.file).name for l in found} == {f"ops_{i:02d}.py" for i in range(40)}
    _found, budget = find_foreign_launches(kernels, analysis.kernels)
    assert budget.files_read == 0  # all cached by (mtime, size)


def test_files_that_do_not_import_the_module_are_read_but_never_parsed(tmp_path):
    kernels = tmp_path / "kernels.py"
    kernels.write_text(KERNELS)
    for index in range(10):  # names the kernel but imports another module; imports the module, names no kernel
        (tmp_path / f"other_{index}.py").write_text(LAUNCHER.replace(".kernels", ".elsewhere") + "y = 1\n" * 1000)
        (tmp_path / f"user_{index}.py").write_text("from . import kernels\nprint(kernels.other_kernel)\n")
    analysis = analyze(KERNELS, str(kernels))
    parsed = _parsed_sizes(lambda: find_foreign_launches(kernels, analysis.kernels))
    assert parsed == []


def test_a_closed_documents_entries_leave_the_cache(tmp_path):
    kernels = _folder(tmp_path, 3, 2000)
    other_folder = tmp_path / "b"
    other_folder.mkdir()
    other_kernels = _folder(other_folder, 2, 2000)
    for path in (kernels, other_kernels):
        assert len(with_foreign_launches(analyze(KERNELS, str(path))).foreign_launches) == len(
            list(path.parent.glob("ops_*.py")))
    assert forget_neighbours(str(kernels)) == 3
    assert {key[1] for key in workspace._cache} == {str(other_kernels)}


def test_a_neighbour_with_thousands_of_launches_keeps_a_bounded_number(tmp_path):
    kernels = tmp_path / "kernels.py"
    kernels.write_text(KERNELS)
    launches = "".join(f"    scale_kernel[(1,)](x, {i}, BLOCK=128)\n" for i in range(300))
    (tmp_path / "ops.py").write_text("from .kernels import scale_kernel\n\n\ndef many(x):\n" + launches)
    found, _budget = find_foreign_launches(kernels, analyze(KERNELS, str(kernels)).kernels)
    assert len(found) == workspace.MAX_LAUNCHES_PER_FILE
