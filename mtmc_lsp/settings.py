"""User settings, shared by the CLI and the language server (section ``mtmc`` in the editor)."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

POLICIES = ("embedded", "heuristic", "endpoint")


@dataclass
class VerificationSettings:
    """How steps are checked: on/off, timeouts, seeds."""

    enabled: bool = True
    compile_timeout_s: float = field(default=120.0, metadata={"range": (1, 3600)})
    run_timeout_s: float = field(default=60.0, metadata={"range": (1, 3600)})
    seeds: int = field(default=3, metadata={"range": (1, 64)})


@dataclass
class Settings:
    """Everything a user can set; editor keys are the camelCase forms of these names."""

    # "" means: the local GPU when there is one, else H100.
    target_gpu: str = field(default="", metadata={"target": True})
    # "embedded" (the bundled GGUF through llama-cpp-python), "heuristic", or "endpoint".
    policy: str = field(default="embedded", metadata={"choices": POLICIES})
    # A GGUF file that replaces the embedded model; "" keeps the default.
    policy_model_path: str = field(default="", metadata={"file": True})
    # A LoRA adapter in GGUF applied on top of the model; "" for none.
    policy_adapter_path: str = field(default="", metadata={"file": True})
    # An OpenAI-compatible base URL (e.g. http://localhost:8000/v1) for policy = "endpoint".
    policy_endpoint: str = field(default="", metadata={"url": True})
    policy_endpoint_model: str = ""
    verification: VerificationSettings = field(default_factory=VerificationSettings)
    # Record every optimization episode as JSONL under .mtmc/trajectories/ (opt-in).
    record_trajectories: bool = False
    # Run a real compilation for the target in the background and report registers/spills.
    compile_diagnostics: bool = True
    # Delay between the last keystroke and fresh diagnostics.
    diagnostics_debounce_ms: int = field(default=200, metadata={"range": (0, 10_000)})
    # Include numerics-changing actions (tf32, half precision) in proposals.
    allow_precision_changes: bool = False
    # The LLM micro coder behind mtmc.llmStep (docs/coder.md): an OpenAI-compatible base URL
    # (e.g. http://localhost:8000/v1) and the model it serves ("": the server's default model) ...
    coder_endpoint: str = field(default="", metadata={"url": True})
    coder_model: str = ""
    # ... or a local GGUF chat model run by llama-cpp-python. The endpoint wins when both are set;
    # with neither, the editor has no coder (the embedded policy model is too small to write diffs).
    coder_model_path: str = field(default="", metadata={"file": True})
    # Workspace Trust: only a boolean true lets the server run the workspace's code (compile
    # diagnostics, verification, optimization, LLM steps). VS Code sends it from its Workspace Trust;
    # clients without Workspace Trust (Neovim, Emacs, ...) set it explicitly per workspace. None: not
    # said, which counts as untrusted (docs/server.md, "Workspace Trust").
    trusted: bool | None = field(default=None, metadata={"type": bool})

    # What was wrong with the editor's values (each one replaced by its default): shown to the user.
    problems: list[str] = field(default_factory=list, compare=False, repr=False, metadata={"internal": True})

    @classmethod
    def from_client(cls, raw: dict[str, Any] | None) -> "Settings":
        """Build settings from an editor's camelCase JSON; a value of the wrong type or out of range
        keeps the default and is explained in ``problems`` (unknown keys are ignored)."""
        problems: list[str] = []
        settings = _from_dict(cls, raw if isinstance(raw, dict) else {}, problems, "mtmc.")
        settings.problems = problems
        return settings

    def to_client(self) -> dict[str, Any]:
        """The camelCase JSON form, as the editor stores it."""
        return _to_dict(self)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _from_dict(cls, raw: dict[str, Any], problems: list[str] | None = None, prefix: str = ""):
    problems = [] if problems is None else problems
    obj = cls()
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = _camel(f.name)
        value = raw.get(key, raw.get(f.name))
        if value is None:
            continue
        current = getattr(obj, f.name)
        problem = None if f.metadata.get("type") is not None else _problem(f, current, value)
        if problem:
            problems.append(f"{prefix}{key}: {problem}; using {_show(current)}")
            continue
        declared = f.metadata.get("type")
        if declared is not None:  # an optional field: only a value of exactly its type counts
            if type(value) is declared:
                setattr(obj, f.name, value)
        elif dataclasses.is_dataclass(current):
            setattr(obj, f.name, _from_dict(type(current), value, problems, f"{prefix}{key}."))
        elif isinstance(current, bool):
            if isinstance(value, bool):
                setattr(obj, f.name, value)
        elif isinstance(current, (int, float)):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(obj, f.name, type(current)(value))
        elif isinstance(value, type(current)):
            setattr(obj, f.name, value)
    return obj


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else repr(value)


def _problem(f: dataclasses.Field, current: Any, value: Any) -> str | None:
    """Why ``value`` cannot be field ``f``'s value, or None when it can."""
    shown = repr(value) if not isinstance(value, (dict, list)) else f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if dataclasses.is_dataclass(current):
        return None if isinstance(value, dict) else f"expected an object, got {shown}"
    if isinstance(current, bool):
        return None if isinstance(value, bool) else f"expected true or false, got {shown}"
    if isinstance(current, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {shown}"
        if not math.isfinite(value):
            return f"{shown} is not a finite number"
        low, high = f.metadata.get("range", (-math.inf, math.inf))
        if not low <= value <= high:
            return f"{shown} is out of range ({low} to {high})"
        if isinstance(current, int) and value != int(value):
            return f"expected a whole number, got {shown}"
        return None
    if isinstance(current, str):
        if not isinstance(value, str):
            return f"expected a string, got {shown}"
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            return f"{shown} is not one of {', '.join(choices)}"
        if f.metadata.get("url") and value and not value.startswith(("http://", "https://")):
            return f"{shown} is not an http(s) URL"
        if f.metadata.get("file") and value and not os.path.isfile(os.path.expanduser(value)):
            return f"{shown} is not a file"
        if f.metadata.get("target") and value:
            from .optimizer.hardware import get_profile

            try:
                get_profile(value)
            except KeyError as exc:
                return str(exc.args[0] if exc.args else exc)
        return None
    return None if isinstance(value, type(current)) else f"expected {type(current).__name__}, got {shown}"


def _to_dict(obj) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.metadata.get("internal"):
            continue
        value = getattr(obj, f.name)
        out[_camel(f.name)] = _to_dict(value) if dataclasses.is_dataclass(value) else value
    return out
