"""Maps the top-level folders onto one import namespace, ``mtmc_lsp``.

The design card keeps ``server/`` and ``optimizer/`` at the top of the repository, but a
generic top-level ``server`` or ``optimizer`` module must never be installed (PyPI has an
``optimizer`` package), so they install as ``mtmc_lsp.server`` and ``mtmc_lsp.optimizer``.
"""

from setuptools import find_packages, setup

FOLDERS = {"mtmc_lsp": "mtmc_lsp", "mtmc_lsp.server": "server", "mtmc_lsp.optimizer": "optimizer"}


def _packages(namespace: str, folder: str) -> list[str]:
    return [namespace] + [f"{namespace}.{sub}" for sub in find_packages(folder)]


setup(
    package_dir=FOLDERS,
    packages=[pkg for ns, folder in FOLDERS.items() for pkg in _packages(ns, folder)],
)
