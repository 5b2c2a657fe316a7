"""Kernel analysis: from the source text of a Triton file to a model of every kernel and launch."""

from .model import (
    Autotune,
    AutotuneConfig,
    Decorator,
    FileAnalysis,
    HostFunction,
    Kernel,
    LaunchArg,
    LaunchSite,
    Loop,
    Param,
    SyntaxErrorInfo,
    TlCall,
    TritonNames,
)
from .parse import analyze, const_eval
from .positions import Position, SourceMap, Span, utf16_len

__all__ = [
    "Autotune", "AutotuneConfig", "Decorator", "FileAnalysis", "HostFunction", "Kernel", "LaunchArg",
    "LaunchSite", "Loop", "Param", "Position", "SourceMap", "Span", "SyntaxErrorInfo", "TlCall",
    "TritonNames", "analyze", "const_eval", "utf16_len",
]
