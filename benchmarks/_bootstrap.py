"""Makes ``mtmc_lsp`` importable from a source checkout that is not pip-installed.

The GPU machine runs the benchmark scripts straight from a copy of the working tree (its Python
has torch and triton but none of our editor dependencies, and nothing can be installed there),
so this maps ``server/`` and ``optimizer/`` onto ``mtmc_lsp.server`` / ``mtmc_lsp.optimizer``
exactly as setup.py does for an install. Import it first: ``import _bootstrap  # noqa``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _map(name: str, folder: Path) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


try:
    import mtmc_lsp.optimizer  # noqa: F401  (installed: nothing to do)
except ModuleNotFoundError:
    sys.path.insert(0, str(ROOT))
    for key in [k for k in sys.modules if k == "mtmc_lsp" or k.startswith("mtmc_lsp.")]:
        del sys.modules[key]
    _map("mtmc_lsp", ROOT / "mtmc_lsp")
    _map("mtmc_lsp.optimizer", ROOT / "optimizer")
    _map("mtmc_lsp.server", ROOT / "server")
