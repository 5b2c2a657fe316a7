"""Does warp specialization close the suite's matmul-class gaps on Hopper? A sweep of hand-written variants.

``python3 benchmarks/warp_specialize_gpu.py --out DIR`` (a GPU with Triton >= 3.4). Two problems, the suite's
slowest against torch.compile (session 11: attention 0.68x, matmul_transposed 0.77x, linear_gelu 0.74x):
- attention 4x16x4096x128 fp16, non-causal: the engine's flash kernel (base-2 exponent, EVEN_N) with its key loop
  written ``range`` (what the engine writes now) or ``tl.range(..., warp_specialize=True)``, pointer or TMA loads;
- C = A @ B^T, 8192x8192x4096 fp16 with B stored (N, K): the engine's grouped tiles reading B as [K, N] through
  strides (now), B read as [N, K] and transposed in registers, the K loop warp-specialized, and a persistent
  tensor-descriptor kernel (Triton's persistent-matmul tutorial's shape) with and without warp specialization.
Each variant runs in its own process (one that faults must not poison the others' CUDA context), is
checked against torch first and timed with ``triton.testing.do_bench`` (median, L2 flushed) beside
torch. A variant that does not compile is recorded with its error: that is a finding too. Writes
``DIR/warp_specialize.json`` and ``.md``. What it decides: whether an action that warp-specializes a kernel's main
loop is worth adding for the H100/H200 target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

try:  # host-side descriptors (Triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: the descriptor variants report the error
    TensorDescriptor = None


@triton.jit
def flash_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, qk_scale, stride_h, stride_s,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 WS: tl.constexpr, TMA: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if TMA:
        q_desc = tl.make_tensor_descriptor(q_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(k_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        q = q_desc.load([pid_m * BLOCK_M, 0])
    else:
        q = tl.load(q_ptr + head * stride_h + offs_m[:, None] * stride_s + offs_d[None, :])
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start in tl.range(0, seq_len, BLOCK_N, warp_specialize=WS):
        offs_n = start + tl.arange(0, BLOCK_N)
        if TMA:
            k = k_desc.load([start, 0])
        else:
            k = tl.load(k_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if TMA:
            v = v_desc.load([start, 0])
        else:
            v = tl.load(v_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :])
        acc = tl.dot(p.to(q_ptr.dtype.element_ty), v, acc)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + head * stride_h + offs_m[:, None] * stride_s + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))


@triton.jit
def matmul_bt_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     B_ROWS: tl.constexpr, WS: tl.constexpr):
    """The engine's grouped tiles; B_ROWS reads B as [N, K] rows and transposes in registers."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :])
        if B_ROWS:
            b = tl.trans(tl.load(b_ptr + offs_n[:, None] * stride_bn + (k + offs_k)[None, :]))
        else:
            b = tl.load(b_ptr + (k + offs_k)[:, None] + offs_n[None, :] * stride_bn)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def matmul_bt_persistent(a_desc, b_desc, c_desc, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                         NUM_SMS: tl.constexpr, WS: tl.constexpr, FLATTEN: tl.constexpr):
    """One program per SM walking the output tiles in grouped order; A, B (N, K) and C through host descriptors."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    group = GROUP_M * num_pid_n
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN, warp_specialize=WS):
        first_m = (tile // group) * GROUP_M
        size_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % size_m
        pid_n = (tile % group) // size_m
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([pid_n * BLOCK_N, ki * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def attention_variants():
    """(label, runner factory) for the flash kernel."""
    out = []
    for ws in (False, True):
        for tma in (False, True):
            for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 4, 2)):
                if not ws and tma and (bm, bn, warps, stages) != (128, 128, 8, 3):
                    continue  # flash_tma's sweep measured TMA without warp specialization already
                label = f"{'ws ' if ws else ''}{'tma ' if tma else ''}{bm}x{bn} w{warps} s{stages}".strip()
                out.append((label, dict(BLOCK_M=bm, BLOCK_N=bn, WS=ws, TMA=tma, num_warps=warps, num_stages=stages)))
    return out


def matmul_variants():
    out = []
    for ws in (False, True):
        for b_rows in (False, True):
            for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4)):
                label = (f"{'ws ' if ws else ''}{'B rows+trans ' if b_rows else 'B strided '}"
                         f"{bm}x{bn}x{bk} w{warps} s{stages}")
                out.append((label, "grouped", dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, B_ROWS=b_rows,
                                                     WS=ws, num_warps=warps, num_stages=stages)))
    for ws in (False, True):
        for flatten in (False, True):
            for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4)):
                label = (f"persistent desc{' ws' if ws else ''}{' flatten' if flatten else ''} "
                         f"{bm}x{bn}x{bk} w{warps} s{stages}")
                out.append((label, "persistent", dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, WS=ws,
                                                        FLATTEN=flatten, num_warps=warps, num_stages=stages)))
    return out


def measure(label, call, expected, tol, rep):
    from triton.testing import do_bench

    row = {"variant": label}
    try:
        got = call()
        torch.cuda.synchronize()
        row["max_abs_err"] = float((got.float() - expected.float()).abs().max())
        if not row["max_abs_err"] <= tol:
            row["error"] = f"wrong: max abs err {row['max_abs_err']:.3g}"
        else:
            row["ms"] = do_bench(call, warmup=25, rep=rep)
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a finding
        text = str(exc).strip()
        row["error"] = f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}"[:240]
    print(json.dumps(row), flush=True)
    return row


def attention_problem():
    """(title, FLOPs, [(label, call, expected, tol)]) with the torch row first."""
    batch, heads, seq_len, head_dim = 4, 16, 4096, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq_len, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
    q3, k3, v3 = (t.reshape(batch * heads, seq_len, head_dim) for t in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v).reshape(batch * heads, seq_len, head_dim)
    cases = [("torch SDPA", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v).reshape(
        batch * heads, seq_len, head_dim), expected, 1e-2)]
    out = torch.empty_like(q3)
    for label, opts in attention_variants():
        def call(opts=opts):
            flash_kernel[(triton.cdiv(seq_len, opts["BLOCK_M"]), q3.shape[0])](
                q3, k3, v3, out, seq_len, head_dim ** -0.5 * 1.4426950408889634, q3.stride(0), q3.stride(1),
                HEAD_DIM=head_dim, **opts)
            return out
        cases.append((label, call, expected, 2e-2))
    return (f"attention {batch}x{heads}x{seq_len}x{head_dim} fp16, non-causal",
            4 * batch * heads * seq_len * seq_len * head_dim, cases)


def matmul_problem():
    m, n, k = 8192, 8192, 4096
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    expected = a @ b.T
    cases = [("torch a @ b.T (cuBLAS)", lambda: a @ b.T, expected, 0.25)]
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for label, kind, opts in matmul_variants():
        if kind == "grouped":
            def call(opts=opts):
                grid = (triton.cdiv(m, opts["BLOCK_M"]) * triton.cdiv(n, opts["BLOCK_N"]),)
                matmul_bt_kernel[grid](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), **opts)
                return c
        else:
            def call(opts=opts):
                bm, bn, bk = opts["BLOCK_M"], opts["BLOCK_N"], opts["BLOCK_K"]
                a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
                b_desc = TensorDescriptor.from_tensor(b, [bn, bk])
                c_desc = TensorDescriptor.from_tensor(c, [bm, bn])
                tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
                matmul_bt_persistent[(min(sms, tiles),)](a_desc, b_desc, c_desc, m, n, k, NUM_SMS=sms, **opts)
                return c
        cases.append((label, call, expected, 0.25))
    return f"C = A @ B^T {m}x{n}x{k} fp16, B stored (N, K)", 2 * m * n * k, cases


PROBLEMS = {"attention": attention_problem, "matmul_bt": matmul_problem}


def one(problem: str, index: int, rep: int) -> int:
    """Measure one variant (in its own process: a variant that faults must not poison the others' context)."""
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    _, flops, cases = PROBLEMS[problem]()
    label, call, expected, tol = cases[index]
    row = measure(label, call, expected, tol, rep)
    if row.get("ms"):
        row["tflops"] = flops / row["ms"] / 1e9
    print("ROW " + json.dumps(row), flush=True)
    return 0


def count_cases(problem: str) -> tuple[str, int]:
    if problem == "attention":
        return "attention 4x16x4096x128 fp16, non-causal", 1 + len(attention_variants())
    return "C = A @ B^T 8192x8192x4096 fp16, B stored (N, K)", 1 + len(matmul_variants())


def run_all(rep: int, timeout_s: int) -> list[dict]:
    import subprocess

    problems = []
    for problem in PROBLEMS:
        title, n = count_cases(problem)
        rows = []
        for index in range(n):
            try:
                proc = subprocess.run([sys.executable, __file__, "--one", problem, str(index), "--rep", str(rep)],
                                      capture_output=True, text=True, timeout=timeout_s)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
                row = json.loads(lines[-1][4:]) if lines else {
                    "variant": f"{problem} #{index}",
                    "error": f"process ended {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"}
            except subprocess.TimeoutExpired:
                row = {"variant": f"{problem} #{index}", "error": f"timed out after {timeout_s} s"}
            rows.append(row)
            print(json.dumps(row), flush=True)
        problems.append({"problem": title, "rows": rows})
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rep", type=int, default=200)
    parser.add_argument("--timeout-s", type=int, default=90, help="per variant, compile included")
    parser.add_argument("--one", nargs=2, metavar=("PROBLEM", "INDEX"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return one(args.one[0], int(args.one[1]), args.rep)
    args.out.mkdir(parents=True, exist_ok=True)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "problems": run_all(args.rep, args.timeout_s)}
    (args.out / "warp_specialize.json").write_text(json.dumps(info, indent=1))
    lines = [f"# Warp specialization on Hopper: attention and C = A @ B^T ({info['device']})", "",
             f"torch {info['torch']}, triton {info['triton']}, {info['utc']} UTC; "
             "`python3 benchmarks/warp_specialize_gpu.py --out DIR`. Median of do_bench (L2 flushed); every variant "
             "checked against torch first (attention to 2e-2, the matmul to 0.25 on outputs of about 64).", ""]
    for problem in info["problems"]:
        torch_ms = problem["rows"][0].get("ms")
        lines += [f"## {problem['problem']}", "", "| variant | ms | TFLOP/s | x torch | error |", "|---|---:|---:|---:|---|"]
        for row in problem["rows"]:
            ms = row.get("ms")
            cells = [f"{ms:.4f}", f"{row['tflops']:.0f}", f"{torch_ms / ms:.2f}x" if torch_ms else "-"] if ms else ["-"] * 3
            lines.append(f"| {row['variant']} | {' | '.join(cells)} | {row.get('error', '')} |")
        lines.append("")
    (args.out / "warp_specialize.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
