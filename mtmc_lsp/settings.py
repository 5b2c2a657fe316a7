"""User settings, shared by the CLI and the language server (section ``mtmc`` in the editor)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class VerificationSettings:
    """How steps are checked: on/off, timeouts, seeds."""

    enabled: bool = True
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    seeds: int = 3


@dataclass
class Settings:
    """Everything a user can set; editor keys are the camelCase forms of these names."""

    # "" means: the local GPU when there is one, else H100.
    target_gpu: str = ""
    # "embedded" (the bundled GGUF through llama-cpp-python), "heuristic", or "endpoint".
    policy: str = "embedded"
    # A GGUF file that replaces the embedded model; "" keeps the default.
    policy_model_path: str = ""
    # A LoRA adapter in GGUF applied on top of the model; "" for none.
    policy_adapter_path: str = ""
    # An OpenAI-compatible base URL (e.g. http://localhost:8000/v1) for policy = "endpoint".
    policy_endpoint: str = ""
    policy_endpoint_model: str = ""
    verification: VerificationSettings = field(default_factory=VerificationSettings)
    # Record every optimization episode as JSONL under .mtmc/trajectories/ (opt-in).
    record_trajectories: bool = False
    # Run a real compilation for the target in the background and report registers/spills.
    compile_diagnostics: bool = True
    # Delay between the last keystroke and fresh diagnostics.
    diagnostics_debounce_ms: int = 200
    # Include numerics-changing actions (tf32, half precision) in proposals.
    allow_precision_changes: bool = False
    # The LLM micro coder behind mtmc.llmStep (docs/coder.md): an OpenAI-compatible base URL
    # (e.g. http://localhost:8000/v1) and the model it serves ("": the server's default model) ...
    coder_endpoint: str = ""
    coder_model: str = ""
    # ... or a local GGUF chat model run by llama-cpp-python. The endpoint wins when both are set;
    # with neither, the editor has no coder (the embedded policy model is too small to write diffs).
    coder_model_path: str = ""
    # Workspace Trust, set by the editor (VS Code sends false in Restricted Mode), not a user setting:
    # when false nothing runs the workspace's code (no compile diagnostics, verification, optimization).
    trusted: bool = True

    @classmethod
    def from_client(cls, raw: dict[str, Any] | None) -> "Settings":
        """Build settings from an editor's camelCase JSON, ignoring unknown keys and bad types."""
        return _from_dict(cls, raw or {})

    def to_client(self) -> dict[str, Any]:
        """The camelCase JSON form, as the editor stores it."""
        return _to_dict(self)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _from_dict(cls, raw: dict[str, Any]):
    obj = cls()
    for f in dataclasses.fields(cls):
        key = _camel(f.name)
        value = raw.get(key, raw.get(f.name))
        if value is None:
            continue
        current = getattr(obj, f.name)
        if dataclasses.is_dataclass(current):
            if isinstance(value, dict):
                setattr(obj, f.name, _from_dict(type(current), value))
        elif isinstance(current, bool):
            if isinstance(value, bool):
                setattr(obj, f.name, value)
        elif isinstance(current, (int, float)):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(obj, f.name, type(current)(value))
        elif isinstance(value, type(current)):
            setattr(obj, f.name, value)
    return obj


def _to_dict(obj) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out[_camel(f.name)] = _to_dict(value) if dataclasses.is_dataclass(value) else value
    return out
