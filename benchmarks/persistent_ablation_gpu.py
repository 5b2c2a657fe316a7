"""Why does the engine's persistent descriptor matmul trail a hand-written one? One difference at a time.

``python3 benchmarks/persistent_ablation_gpu.py --out DIR`` (a GPU with Triton >= 3.4). Session 12 measured a
hand-written persistent kernel with host-side tensor descriptors (Triton's persistent-matmul tutorial's shape) at
1.10x of cuBLAS on C = A @ B^T (``results/h200/warp_specialize/``), while the engine's own
"descriptors, persistent, flattened" edit of the suite file ran 0.84 ms, slower than cuBLAS, in another run
(``results/h200/persistent/``). This script times, in one run and beside torch, on the three suite matmuls:
- the engine's generated variants (``benchmarks/generated/persistent/``) through their host functions;
- the engine's flattened variant with one change each: ``acc = tl.dot(a, b, acc)`` for ``acc += tl.dot(a, b)``;
  the SM count as a literal for ``tl.num_programs(0)``; the kernel launched directly (no host function);
- a hand-written persistent kernel with host descriptors, and the same kernel making its descriptors on the device.
Each variant runs in its own process, is checked against torch first and timed with ``triton.testing.do_bench``
(median, L2 flushed). Writes ``DIR/persistent_ablation.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

try:  # host-side descriptors (Triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "benchmarks" / "generated" / "persistent"
PROBLEMS = {  # name -> (kernel name in the generated file, B stored (N, K))
    "matmul": ("matmul_kernel", False),
    "matmul_transposed": ("matmul_bt_kernel", True),
    "linear_gelu": ("linear_kernel", True),
}
ENGINE = {  # label -> generated file index (manifest order of persistent_gpu.py)
    "engine grouped": 0,
    "engine descriptors, persistent": 4,
    "engine descriptors, persistent, flattened": 5,
    "engine persistent, descriptors": 6,
}


@triton.jit
def persistent_host_desc(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                         B_NK: tl.constexpr, FLATTEN: tl.constexpr):
    """One program per SM over the output tiles in grouped order; A, B and C through host descriptors."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    group = GROUP_M * num_pid_n
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN):
        first_m = (tile // group) * GROUP_M
        size_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % size_m
        pid_n = (tile % group) // size_m
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            if B_NK:
                b = b_desc.load([pid_n * BLOCK_N, ki * BLOCK_K]).T
            else:
                b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def persistent_device_desc(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                           NUM_SMS: tl.constexpr, B_NK: tl.constexpr, FLATTEN: tl.constexpr):
    """``persistent_host_desc`` with its descriptors made on the device, once per program."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_NK:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    group = GROUP_M * num_pid_n
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN):
        first_m = (tile // group) * GROUP_M
        size_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % size_m
        pid_n = (tile % group) // size_m
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            if B_NK:
                b = b_desc.load([pid_n * BLOCK_N, ki * BLOCK_K]).T
            else:
                b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def generated_path(problem: str, index: int) -> Path:
    return GENERATED / f"{problem}_{index}.py"


def load_text(text: str, tag: str):
    """A module from ``text`` (written next to the generated files so Triton can read its source)."""
    path = Path("/tmp") / f"ablation_{tag}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"ablation_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def text_edits() -> dict:
    """label -> function of the flattened engine text giving the changed text."""
    return {
        "engine flattened, acc = tl.dot(a, b, acc)": lambda t: re.sub(
            r"acc \+= tl\.dot\((\w+), (\w+)\)", r"acc = tl.dot(\1, \2, acc)", t),
        "engine flattened, SM count literal": lambda t: t.replace(
            "tl.num_programs(0)", str(torch.cuda.get_device_properties(0).multi_processor_count)),
    }


def cases(problem: str) -> list[tuple]:
    """(label, factory) where factory(inputs) returns a zero-argument call producing the output."""
    kernel_name, b_nk = PROBLEMS[problem]
    out = []
    for label, index in ENGINE.items():
        def factory(inputs, index=index):
            module = load_text(generated_path(problem, index).read_text(), f"{problem}_{index}")
            fn = getattr(module, problem)
            return lambda: fn(*inputs)
        out.append((label, factory))
    for label, edit in text_edits().items():
        def factory(inputs, edit=edit, label=label):
            text = edit(generated_path(problem, 5).read_text())
            module = load_text(text, f"{problem}_{abs(hash(label))}")
            fn = getattr(module, problem)
            return lambda: fn(*inputs)
        out.append((label, factory))
    for flatten in (True, False):
        for host in (True, False):
            label = f"hand {'host' if host else 'device'} descriptors{', flattened' if flatten else ''}"

            def factory(inputs, flatten=flatten, host=host):
                return hand_call(problem, inputs, b_nk, flatten, host)
            out.append((label, factory))
    return out


def hand_call(problem: str, inputs, b_nk: bool, flatten: bool, host: bool):
    """The hand-written kernel on the problem's matmul (linear_gelu: the matmul plus torch's bias and GELU)."""
    a, b = inputs[0], inputs[1]
    m, k = a.shape
    n = b.shape[0] if b_nk else b.shape[1]
    c = torch.empty(m, n, device="cuda", dtype=a.dtype)
    bm, bn, bk = 128, 256, 64
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = (min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
    opts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, NUM_SMS=sms, B_NK=b_nk, FLATTEN=flatten,
                num_warps=8, num_stages=3)

    def matmul():
        if host:
            a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
            b_desc = TensorDescriptor.from_tensor(b, [bn, bk] if b_nk else [bk, bn])
            c_desc = TensorDescriptor.from_tensor(c, [bm, bn])
            persistent_host_desc[grid](a_desc, b_desc, c_desc, m, n, k, **opts)
        else:
            persistent_device_desc[grid](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), **opts)
        return c

    if problem == "linear_gelu":
        bias = inputs[2]
        return lambda: torch.nn.functional.gelu(matmul().float() + bias.float()).to(a.dtype)
    return matmul


def one(problem: str, index: int, rep: int) -> int:
    """Measure one variant in this process; index -1 is torch's eager code of the file."""
    from triton.testing import do_bench

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    base = load_text(generated_path(problem, 0).read_text(), f"{problem}_base")
    torch.manual_seed(0)
    inputs = base.get_inputs(device="cuda")
    expected = base.reference(*inputs)
    if index < 0:
        label, call = "torch eager", lambda: base.eager(*inputs)
    else:
        label, factory = cases(problem)[index]
        call = factory(inputs)
    row = {"problem": problem, "variant": label}
    try:
        got = call()
        torch.cuda.synchronize()
        row["max_abs_err"] = float((got.double() - expected.double()).abs().max())
        if not torch.allclose(got.double(), expected.double(), rtol=2e-2, atol=5e-2):
            row["error"] = f"wrong: max abs err {row['max_abs_err']:.3g}"
        else:
            row["ms"] = do_bench(call, warmup=25, rep=rep)
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a finding
        text = str(exc).strip()
        row["error"] = f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}"[:240]
    print("ROW " + json.dumps(row), flush=True)
    return 0


def run_all(rep: int, timeout_s: int) -> list[dict]:
    rows = []
    for problem in PROBLEMS:
        for index in range(-1, len(cases(problem))):
            try:
                proc = subprocess.run([sys.executable, __file__, "--one", problem, str(index), "--rep", str(rep)],
                                      capture_output=True, text=True, timeout=timeout_s)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
                row = json.loads(lines[-1][4:]) if lines else {
                    "problem": problem, "variant": f"#{index}",
                    "error": f"process ended {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"}
            except subprocess.TimeoutExpired:
                row = {"problem": problem, "variant": f"#{index}", "error": f"timed out after {timeout_s} s"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


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
            "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "rows": run_all(args.rep, args.timeout_s)}
    (args.out / "persistent_ablation.json").write_text(json.dumps(info, indent=1))
    lines = [f"# Persistent descriptor matmul: the engine's edit against hand-written kernels ({info['device']})", "",
             f"torch {info['torch']}, triton {info['triton']}, {info['utc']} UTC; "
             "`python3 benchmarks/persistent_ablation_gpu.py --out DIR`. Median of do_bench (L2 flushed), each variant "
             "in its own process, checked against the file's reference first. Tiles 128x256x64, 8 warps, 3 stages, "
             "GROUP_M=8.", "", "| problem | variant | ms | x torch eager | error |", "|---|---|---:|---:|---|"]
    torch_ms = {r["problem"]: r.get("ms") for r in info["rows"] if r["variant"] == "torch eager"}
    for row in info["rows"]:
        ms, ref = row.get("ms"), torch_ms.get(row["problem"])
        cells = [f"{ms:.4f}", f"{ref / ms:.3f}" if ref else "-"] if ms else ["-", "-"]
        lines.append(f"| {row['problem']} | {row['variant']} | {' | '.join(cells)} | {row.get('error', '')} |")
    (args.out / "persistent_ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
