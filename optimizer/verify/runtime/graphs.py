"""CUDA-graph timing: the GPU work of one call, without the host's launch overhead or a synchronize.

Timing a call directly needs a ``torch.cuda.synchronize`` inside the timed region (work put on another
stream or thread must count), and that adds the host's wake-up latency, 10-30 us and noisy, to every
run: on a 40 us kernel it hides half of any speedup. A CUDA graph of the call holds exactly the GPU
work the call enqueued, and replaying it costs the host almost nothing.

A graph is trusted only after it proves itself, once per round: its inputs are overwritten with a
second, different input set, its outputs poisoned, and one replay must reproduce what a direct call
computes on that second set. Work the graph does not contain (a kernel put on another stream or
thread, a result computed at capture time, a cache keyed on the input) leaves poison or the first
set's result behind; then :class:`GraphRefused` says why and the caller times every implementation
the synchronized way instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import compare as cmp
from .poison import _poison
from .versions import copy_into


class GraphRefused(Exception):
    """The call cannot be timed as a CUDA graph (capture failed, or the replay did not reproduce it)."""


_capture_stream: torch.cuda.Stream | None = None


def _stream() -> torch.cuda.Stream:
    """One side stream per process for captures (a library's per-stream workspace is made once)."""
    global _capture_stream
    if _capture_stream is None:
        _capture_stream = torch.cuda.Stream()
    return _capture_stream


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors in a nested result or argument list, in a stable order; other leaves are skipped."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for key in sorted(value, key=str) for t in tensor_leaves(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensor_leaves(item)]
    return []


def poison_outputs(output: Any, inputs: Any) -> int:
    """Poison every output tensor that does not share storage with an input; returns how many."""
    kept = {t.untyped_storage().data_ptr() for t in tensor_leaves(inputs)}
    count = 0
    for tensor in tensor_leaves(output):
        if tensor.untyped_storage().data_ptr() not in kept and tensor.numel():
            _poison(tensor.detach())
            count += 1
    return count


def reproduces(graph_result: Any, direct_result: Any) -> str | None:
    """None when the replay's tensors (outputs, inputs after the call) match the direct call's, else why not."""
    verdict = cmp.compare(tensor_leaves(graph_result), tensor_leaves(direct_result), scale=2.0)
    if verdict["ok"]:
        return None
    mismatch = verdict.get("mismatch") or {}
    where = mismatch.get("output") or mismatch.get("reason") or "a result"
    return f"a replay on new inputs did not reproduce the direct call ({where})"


def release_generators() -> None:
    """Give the default CUDA generators a fresh state after a failed capture.

    ``capture_begin`` marks them as capturing, and only a ``capture_end`` that succeeds unmarks them: after a
    capture that a host sync invalidated (a reference calling ``.tolist()``), every later ``torch.randn`` on
    the GPU failed with "Offset increment outside graph capture" (wild dev attn_causal_context_lightllm, H200),
    the next round's inputs among them. A cloned state has the same seed and offset and is not capturing.
    """
    for generator in getattr(torch.cuda, "default_generators", ()):
        try:
            generator.graphsafe_set_state(generator.clone_state())
        except (AttributeError, RuntimeError):  # an older torch without graph-safe states: nothing to release
            pass


@dataclass
class GraphCall:
    """A captured call, proven to redo its work on new inputs; ``replay`` is what gets timed."""

    graph: Any
    args: Any
    output: Any

    def replay(self) -> None:
        self.graph.replay()

    @classmethod
    def prove(cls, fn: Callable[[Any], Any], args: Any, check_inputs: Any, clone: Callable[[Any], Any]) -> GraphCall:
        """Capture ``fn(args)``, then replay it on ``check_inputs`` against a direct call; raise GraphRefused."""
        stream = _stream()
        stream.wait_stream(torch.cuda.current_stream())
        direct_args = clone(check_inputs)
        try:
            with torch.cuda.stream(stream):
                fn(clone(args))  # a warm call on the capture stream: per-stream workspaces exist before capture
                direct_out = fn(direct_args)
            torch.cuda.synchronize()
            # A snapshot: an output the call hands out again (a cache) must not be poisoned on both sides.
            direct = clone((tensor_leaves(direct_out), tensor_leaves(direct_args)))
        except Exception as exc:  # noqa: BLE001 - user code; the synchronized path reports its errors
            raise GraphRefused(f"a direct call failed: {_first_line(exc)}") from None
        del direct_out, direct_args
        graph = torch.cuda.CUDAGraph()
        failure = None
        with torch.cuda.stream(stream):
            graph.capture_begin()
            try:
                output = fn(args)
            except Exception as exc:  # noqa: BLE001 - a host sync, an allocation or a module load during capture
                failure = f"capture failed: {_first_line(exc)}"
                output = None
            try:
                graph.capture_end()
            except Exception as exc:  # noqa: BLE001 - the capture was invalidated (work outside the stream)
                failure = failure or f"capture failed: {_first_line(exc)}"
        torch.cuda.current_stream().wait_stream(stream)
        if failure:
            release_generators()
            torch.cuda.synchronize()
            raise GraphRefused(failure)
        if not copy_into(args, check_inputs):
            raise GraphRefused("the second input set has other shapes")
        poison_outputs(output, args)
        graph.replay()
        torch.cuda.synchronize()
        why = reproduces((output, args), direct)
        if why:
            raise GraphRefused(why)
        return cls(graph, args, output)
