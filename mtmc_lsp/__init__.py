"""MTMC-LSP: analyse, optimize and verify Triton kernels from the editor."""

__version__ = "0.1.0"
