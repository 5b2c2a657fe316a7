"""LSP features, one module per request or notification family; ``register_all`` wires them up."""

from __future__ import annotations

from importlib import import_module

# Order matters only for readability of the capabilities; each module has register(server).
FEATURE_MODULES = (
    "lifecycle",
    "configuration",
    "document_sync",
    "hover",
    "code_lens",
    "targets",
    "code_action",
    "code_action_resolve",
    "step_commands",
    "verify_kernel",
    "optimize_kernel",
    "llm_step",
    "write_triton",
)


def register_all(server) -> None:
    for name in FEATURE_MODULES:
        import_module(f"{__name__}.{name}").register(server)
