"""use_dot on tile products of upcast 16-bit loads (flash-linear-attention's ``b_x = tl.load(...).to(tl.float32)``)."""

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")

UPCAST = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :]).to(tl.float32)
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :]).to(tl.float32)
    c = tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], c)


def mm(a, b):
    c = torch.empty((32, 32), device=a.device, dtype=torch.float32)
    mm_kernel[(1,)](a, b, c, BLOCK=32)
    return c
'''


def use_dot(text: str) -> str:
    candidate, = [c for c in applicable(analyze(text), "mm_kernel", H100) if c.action == "use_dot"]
    return apply_candidate(text, candidate, H100).new_text


def test_the_dot_takes_the_loaded_values_when_both_operands_are_upcast_loads():
    new = use_dot(UPCAST)
    assert "c = tl.dot(a, b)" in new and ".to(tl.float32)" not in new
    assert "a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])" in new


def test_an_upcast_read_elsewhere_keeps_its_cast_and_the_file_precision_rule():
    text = UPCAST.replace("    tl.store(c_ptr", "    c += tl.sum(a, axis=1)[:, None]\n    tl.store(c_ptr")
    new = use_dot(text)
    assert new.count(".to(tl.float32)") == 2 and 'tl.dot(a, b, input_precision="ieee")' in new
