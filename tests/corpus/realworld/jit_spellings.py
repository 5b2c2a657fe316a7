"""Other ways to spell triton: from-imports, aliases, keyword-only constexprs, do_not_specialize."""
from triton import Config, autotune, cdiv, heuristics, jit
from triton import language as language
import triton.language as tl2


@jit
def plain_jit(x_ptr, n, BLOCK: language.constexpr):
    offs = language.program_id(0) * BLOCK + language.arange(0, BLOCK)
    language.store(x_ptr + offs, language.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@autotune(configs=[Config({"BLOCK": 128}, num_warps=4), Config({"BLOCK": 512}, num_warps=8)], key=["n"])
@jit(do_not_specialize=["n"])
def tuned_jit(x_ptr, n, BLOCK: tl2.constexpr):
    offs = tl2.program_id(0) * BLOCK + tl2.arange(0, BLOCK)
    tl2.store(x_ptr + offs, tl2.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@heuristics(values={"BLOCK": lambda args: 256})
@jit()
def heuristic_block(x_ptr, n, *, BLOCK: tl2.constexpr):
    offs = tl2.program_id(0) * BLOCK + tl2.arange(0, BLOCK)
    tl2.store(x_ptr + offs, tl2.zeros([BLOCK], dtype=tl2.float32), mask=offs < n)


def launch(x):
    n = x.numel()
    plain_jit[(cdiv(n, 256),)](x, n, BLOCK=256)
    tuned_jit[lambda meta: (cdiv(n, meta["BLOCK"]),)](x, n)
    heuristic_block[(cdiv(n, 256),)](x, n)
