"""Exact GELU in unsloth's style: a module-level @triton.jit with spaced constexpr annotation, lambda-meta grid."""

import torch
import triton
import triton.language as tl


@triton.jit
def _exact_forward_kernel(e, h, n_elements, BLOCK_SIZE : tl.constexpr,):
    block_idx = tl.program_id(0)
    offsets = block_idx*BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements

    e_row = tl.load(e + offsets, mask = mask, other = 0).to(tl.float32)
    # f = 1/2 * e * (1 + erf(1/sqrt(2) * e))
    f_row = 0.5 * e_row * (tl.math.erf(tl.math.rsqrt(2.0) * e_row) + 1.0)
    f_row = f_row.to(h.dtype.element_ty)
    tl.store(h + offsets, f_row, mask = mask)


def gelu_exact_forward_kernel(gate):
    batch, seq_len, hd = gate.shape
    n_elements = gate.numel()
    out = torch.empty((batch, seq_len, hd), dtype = gate.dtype, device = gate.device)
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']),)
    _exact_forward_kernel[grid](gate, out, n_elements, BLOCK_SIZE = 1024,)
    return out


def get_inputs(device: str = "cuda", batch: int = 4, seq_len: int = 2048, hd: int = 14336):
    return [torch.randn(batch, seq_len, hd, device=device, dtype=torch.float16)]


def reference(gate):
    return torch.nn.functional.gelu(gate.float()).to(gate.dtype)


def eager(gate):
    """GELU in the input's fp16."""
    return torch.nn.functional.gelu(gate)
