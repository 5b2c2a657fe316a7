"""Triton's rules in one home: launch defaults, element sizes, tensor-core minimums, shared memory.

Analysis, checks, actions, compile planning, verification and hover read these; none defines its
own copy (the numbers drifted apart when three modules each knew part of Triton).
"""

from __future__ import annotations

# What a CUDA launch gets when neither the launch nor an autotune config names them.
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3
# tl.dot needs every operand dimension to be at least 16 (the tensor-core tile minimum).
MIN_DOT_DIM = 16

# Element sizes by Triton's dtype names (tl.float16, pointer element types).
DTYPE_BYTES = {
    "float8e4nv": 1, "float8e5": 1, "float8e4b15": 1, "float8e4b8": 1, "float8e5b16": 1, "int8": 1, "uint8": 1,
    "float16": 2, "bfloat16": 2, "int16": 2, "float32": 4, "int32": 4, "float64": 8, "int64": 8,
}
# Element sizes by the torch names host code uses (torch.float16, torch.half, ...).
TORCH_DTYPE_BYTES = {"float64": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1}


def pipeline_stages(loop_depth: int, loop_num_stages: int | None, launch_num_stages: int | None) -> int:
    """How many copies of a dot's operand tiles live in shared memory: one outside any loop, else
    ``tl.range(..., num_stages=)`` or the launch's num_stages or Triton's default."""
    if loop_depth == 0:
        return 1
    return loop_num_stages or launch_num_stages or DEFAULT_NUM_STAGES


def dot_shared_bytes(m: int, n: int, k: int, a_bytes: int, b_bytes: int, stages: int) -> int:
    """Triton's own rule of thumb (matmul tutorial pruning): both operand tiles, once per stage."""
    return (m * k * a_bytes + k * n * b_bytes) * max(stages, 1)
