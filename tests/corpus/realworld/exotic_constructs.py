"""Less common constructs: inline asm, custom reductions and scans, debug ops, walrus and match in host code."""
import triton
import triton.language as tl


@triton.jit
def _max_and_index(a_value, a_index, b_value, b_index):
    keep_a = a_value > b_value
    return tl.where(keep_a, a_value, b_value), tl.where(keep_a, a_index, b_index)


@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def exotic_kernel(x_ptr, out_ptr, idx_ptr, scan_ptr, n: tl.int32, BLOCK: tl.constexpr = 256,
                  DEBUG: tl.constexpr = False):
    """A kernel with a docstring."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf"), eviction_policy="evict_last")
    doubled = tl.inline_asm_elementwise(
        asm="add.f32 $0, $1, $1;", constraints="=r,r", args=[x], dtype=tl.float32, is_pure=True, pack=1,
    )
    value, index = tl.reduce((doubled, offs), 0, _max_and_index)
    running = tl.associative_scan(tl.where(mask, x, 0.0), 0, _add_combine)
    if DEBUG:
        tl.device_print("max", value)
        tl.device_assert(index >= 0, "negative index")
    tl.static_assert(BLOCK >= 16, "BLOCK too small")
    tl.store(out_ptr + pid, value)
    tl.store(idx_ptr + pid, index)
    tl.store(scan_ptr + offs, running, mask=mask)
    _ = tl.cast(x, tl.float16, fp_downcast_rounding="rtne")


def launch(x, out, idx, scan, *extra, **options):
    if (n := x.numel()) == 0:
        return
    match options.get("mode"):
        case "debug":
            exotic_kernel[(triton.cdiv(n, 256),)](x, out, idx, scan, n, DEBUG=True, *extra)
        case _:
            exotic_kernel[(triton.cdiv(n, 256),)](x, out, idx, scan, n, **options)
    kernel = exotic_kernel
    kernel[(1,)](x, out, idx, scan, n)
