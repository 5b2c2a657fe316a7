"""Macro thinking: policies that rank the applicable optimization actions for a kernel on a target GPU.

``make_policy(settings)`` picks one: the embedded GGUF model through llama-cpp-python (default),
the hardware-aware heuristic, or an OpenAI-compatible endpoint. llama_cpp is imported only when
the model loads, so this package imports on machines without it.
"""

from .base import Policy, PolicyState, Ranked, StepOutcome, candidate_text, candidate_texts
from .factory import default_model_path, llama_cpp_available, make_policy
from .features import KernelFeatures, kernel_features
from .heuristic import HeuristicPolicy

__all__ = [
    "HeuristicPolicy", "KernelFeatures", "Policy", "PolicyState", "Ranked", "StepOutcome", "candidate_text",
    "candidate_texts", "default_model_path", "kernel_features", "llama_cpp_available", "make_policy",
]


def __getattr__(name: str):
    # The model-backed policies load lazily so importing this package stays cheap.
    if name == "LlamaCppPolicy":
        from .llama import LlamaCppPolicy

        return LlamaCppPolicy
    if name == "EndpointPolicy":
        from .endpoint import EndpointPolicy

        return EndpointPolicy
    raise AttributeError(name)
