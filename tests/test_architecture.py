"""The layout rules of docs/ARCHITECTURE.md, checked on the source: leaves stay leaves, the engine never
imports the editor side, and each example kernel has one home."""

from __future__ import annotations

import ast
from pathlib import Path

from corpus.kernels import ELSEWHERE, kernel_files
from corpus.kernels import HERE as CORPUS

ROOT = Path(__file__).resolve().parents[1]
FEATURES = ROOT / "server" / "features"
EDITOR_LIBRARIES = ("pygls", "lsprotocol", "llama_cpp")


def imported_modules(tree: ast.Module, top_level_only: bool = False) -> list[tuple[int, str]]:
    """(relative level, dotted name) of every import, or only of the module's own statements."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found += [(node.level, f"{base}.{alias.name}".strip(".")) for alias in node.names]
    return found


def test_no_feature_module_imports_another():
    features = {p.stem for p in FEATURES.glob("*.py") if p.stem != "__init__"}
    for path in sorted(FEATURES.glob("*.py")):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        for level, name in imported_modules(tree):
            if level == 1:  # ``from .x import y`` / ``from . import x``: a sibling feature module
                assert name.split(".")[0] not in features, f"{path.name} imports the feature {name}"


def test_the_engine_never_imports_the_server_nor_editor_libraries_at_import_time():
    for path in sorted((ROOT / "optimizer").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for level, name in imported_modules(tree):
            assert not (level >= 2 and name.split(".")[0] == "server"), f"{path.relative_to(ROOT)} imports {name}"
            assert not name.startswith("mtmc_lsp.server"), f"{path.relative_to(ROOT)} imports {name}"
        for level, name in imported_modules(tree, top_level_only=True):
            assert level or name.split(".")[0] not in EDITOR_LIBRARIES, f"{path.relative_to(ROOT)} imports {name}"


def jit_kernels(path: Path) -> dict[str, str]:
    """The ``@triton.jit`` functions of a file, each as its syntax tree dumped (spacing and comments ignored)."""
    tree = ast.parse(path.read_text())
    return {node.name: ast.dump(node) for node in tree.body if isinstance(node, ast.FunctionDef)
            and any("jit" in ast.unparse(d) for d in node.decorator_list)}


def test_each_example_kernel_has_one_home():
    homes = sorted((ROOT / "mtmc_lsp" / "examples").glob("[!_]*.py")) + sorted(
        p for p in (ROOT / "benchmarks" / "suite").glob("*.py") if not p.name.startswith("_"))
    homes += [p for p in kernel_files() if p.parent == CORPUS]
    kernels = {path: set(jit_kernels(path).values()) for path in homes}
    for path, mine in kernels.items():  # a file whose kernels all stand in another file is a copy of it
        copies = [other for other, theirs in kernels.items() if other != path and mine and mine <= theirs]
        assert not copies, f"{path.relative_to(ROOT)} repeats the kernels of {copies[0].relative_to(ROOT)}"
    assert not [name for name in ELSEWHERE if (CORPUS / f"{name}.py").exists()], "a corpus copy shadows its home"
    assert all(path.is_file() for path in ELSEWHERE.values())
