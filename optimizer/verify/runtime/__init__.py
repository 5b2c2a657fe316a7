"""Code that runs inside a verification worker process (stdlib, torch and triton only).

This package is loaded by the worker as a stand-alone top-level package (see ``pool.py``), so its
modules import only each other, never the rest of ``mtmc_lsp``.
"""
