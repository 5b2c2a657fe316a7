"""KernelBench: tracing, lowering of every op class (outputs checked in the Triton interpreter), static checks,
scoring arithmetic, and the command's resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mtmc_lsp.optimizer.kernelbench.evaluate import (  # noqa: E402
    ProblemResult, discover_problems, fast_p, load_results, mean_speedups, static_check, summarize)
from mtmc_lsp.optimizer.kernelbench.lower import group_nodes, lower  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.trace import load_problem, shrink_sizes, trace_problem  # noqa: E402
from mtmc_lsp.optimizer.kernelbench.write import REFERENCE_MARKER, generate, solution_part  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "tests" / "kernelbench_problems"

# Each op class in a small problem of its own (the problem folder covers the L1/L2 shapes of the brief).
OP_PROBLEMS = {
    "pointwise_chain_broadcast": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.bias = nn.Parameter(torch.randn(1, 12))

            def forward(self, x, y):
                z = torch.sigmoid(x) * y + self.bias
                z = torch.min(z, torch.tensor(0.8))
                z = F.leaky_relu(z, 0.2) - 0.5
                z = torch.clamp(z, min=-0.3, max=0.6)
                return F.gelu(torch.tanh(z) / 2.0, approximate="tanh") + F.softplus(z) + F.silu(z) * F.hardswish(z)

        def get_inputs():
            return [torch.randn(5, 7, 12), torch.randn(7, 1)]
        """, {"pointwise"}),
    "activations": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.act = nn.ELU(alpha=0.7)

            def forward(self, x):
                return self.act(x) + F.selu(x) + F.softsign(x) + F.hardsigmoid(x) + F.mish(x) + x ** 2 + torch.exp(-x.abs())

        def get_inputs():
            return [torch.randn(3, 50)]
        """, {"pointwise"}),
    "scalar_input": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, A, s):
                return A * s

        def get_inputs():
            return [torch.randn(9, 33), 3.14]
        """, {"pointwise"}),
    "reductions": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x):
                a = torch.mean(x, dim=(2, 3), keepdim=True)
                b = torch.max(x, dim=1)[0]
                c = torch.amin(x, dim=-1)
                return a.sum() + b.sum(dim=1) .mean() + c.max()

        def get_inputs():
            return [torch.randn(2, 3, 9, 10)]
        """, {"reduce"}),
    "rms_norm": ("""
        class Model(nn.Module):
            def __init__(self, eps):
                super(Model, self).__init__()
                self.eps = eps

            def forward(self, x):
                rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
                return x / rms

        def get_inputs():
            return [torch.randn(2, 6, 5, 4)]

        def get_init_inputs():
            return [1e-5]
        """, {"normalize"}),  # pow -> mean -> add -> sqrt -> div: one kernel
    "softmax_log_softmax": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x):
                return torch.softmax(x, dim=1) + torch.log_softmax(x, dim=-1)

        def get_inputs():
            return [torch.randn(3, 11, 11)]
        """, {"softmax", "log_softmax"}),  # the add is log_softmax's fused tail (it reads softmax's output)
    "channel_norms": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.gn = nn.GroupNorm(2, 6)
                self.inorm = nn.InstanceNorm2d(6)
                self.bn = nn.BatchNorm2d(6)
                self.bn1 = nn.BatchNorm1d(5)

            def forward(self, x, y):
                return self.bn(self.inorm(self.gn(x))), self.bn1(y)

        def get_inputs():
            return [torch.randn(3, 6, 4, 5) * 2 + 1, torch.randn(7, 5)]
        """, {"group_norm", "batch_norm"}),
    "logsumexp": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x):
                return torch.logsumexp(x * 10.0, dim=1, keepdim=True)

        def get_inputs():
            return [torch.randn(6, 40)]
        """, {"reduce"}),
    "conv_1d_3d_transposed_grouped": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.c1 = nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2)
                self.t2 = nn.ConvTranspose2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0))
                self.c3 = nn.Conv3d(2, 3, 2, bias=False)
                self.t3 = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, groups=1, dilation=1)
                self.dw = nn.Conv2d(3, 3, 3, padding=1, groups=3)
                self.t1 = nn.ConvTranspose1d(4, 2, 3, stride=1, padding=1, dilation=2)

            def forward(self, a, b, c):
                return self.c1(a), torch.sigmoid(self.t2(b)), self.t3(self.c3(c)) - 1.0, self.dw(b), self.t1(a)

        def get_inputs():
            return [torch.randn(2, 4, 11), torch.randn(2, 3, 5, 6), torch.randn(1, 2, 4, 5, 3)]
        """, {"conv"}),
    "pooling_and_norms": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.mp1 = nn.MaxPool1d(3, stride=2, padding=1, dilation=2)
                self.mp2 = nn.MaxPool2d(2)
                self.ap3 = nn.AvgPool3d(2, stride=1, padding=1)
                self.ap2 = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
                self.gap = nn.AdaptiveAvgPool3d((1, 1, 1))

            def forward(self, a, b, c):
                return (self.mp1(a), self.mp2(b), self.ap3(c), self.ap2(b), self.gap(c),
                        b / torch.norm(b, p=2, dim=1, keepdim=True), torch.norm(a, p="fro"))

        def get_inputs():
            return [torch.randn(2, 3, 13), torch.randn(2, 3, 7, 8), torch.randn(1, 2, 4, 5, 3)]
        """, {"pool", "reduce"}),
    "scans": ("""
        class Model(nn.Module):
            def __init__(self, dim):
                super(Model, self).__init__()
                self.dim = dim

            def forward(self, x, y):
                # rows longer than one block (1100 > 1024) carry the sum from block to block
                return (torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim), torch.cumprod(y, dim=0),
                        torch.cumsum(x, dim=-1))

        def get_inputs():
            return [torch.rand(2, 1100), torch.rand(4, 6) + 0.5]

        def get_init_inputs():
            return [1]
        """, {"scan"}),
    "layer_norm_functional": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.w = nn.Parameter(torch.randn(30))

            def forward(self, x):
                return F.layer_norm(x, (30,), self.w, None, 1e-6)

        def get_inputs():
            return [torch.randn(4, 30)]
        """, {"layer_norm"}),
    "matmul_flatten_transposed": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.fc = nn.Linear(20, 17, bias=False)

            def forward(self, x, B):
                y = self.fc(x)
                z = torch.einsum("bij,jk->bik", y, B.T)
                return torch.matmul(y, B.T) * 0.25 + z + torch.einsum("bik,bkj->bij", z, z.transpose(1, 2))[:, :, :1]

        def get_inputs():
            return [torch.randn(2, 9, 20), torch.randn(13, 17)]
        """, {"matmul"}),
    "conv2d_strided": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.conv = nn.Conv2d(3, 5, (3, 2), stride=2, padding=(1, 0), dilation=(1, 2))

            def forward(self, x):
                return torch.relu(self.conv(x)) * 2.0

        def get_inputs():
            return [torch.randn(2, 3, 9, 8)]
        """, {"conv"}),
    "conv_window_outer": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                # 16+ input channels a group: the kernel-offset-outer path with permuted weights
                self.conv = nn.Conv2d(32, 6, 3, stride=2, padding=1, dilation=(1, 2), groups=2)
                self.up = nn.ConvTranspose2d(16, 5, 3, stride=2, padding=1, output_padding=1)
                self.conv1 = nn.Conv1d(20, 4, 2, bias=False)

            def forward(self, x, y, z):
                return torch.tanh(self.conv(x)), self.up(y) - 0.5, self.conv1(z)

        def get_inputs():
            return [torch.randn(2, 32, 7, 9), torch.randn(1, 16, 4, 3), torch.randn(2, 20, 6)]
        """, {"conv"}),
    "row_normalizations": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x, y, z):
                rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)  # over channels: strided
                centered = z - torch.mean(z, dim=(2, 3), keepdim=True)  # over the last dims
                # a row longer than one tile: the statistic pass, then the output pass
                return x / rms, y / torch.norm(y, p=2, dim=1, keepdim=True), centered, y / torch.max(y.abs(), dim=1, keepdim=True)[0]

        def get_inputs():
            return [torch.randn(2, 6, 3, 4), torch.randn(2, 9000), torch.randn(2, 3, 4, 5)]
        """, {"normalize"}),
    "norms_two_pass": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.ln = nn.LayerNorm(9000)
                self.gn = nn.GroupNorm(2, 4)
                self.bn = nn.BatchNorm1d(3)

            def forward(self, x, y, z):
                # rows longer than one tile: shifted sums, then the write pass; a mean far from 0 must not cancel
                return self.ln(x + 100.0), self.gn(y), self.bn(z * 3.0 - 50.0)

        def get_inputs():
            return [torch.randn(2, 9000), torch.randn(2, 4, 70, 70), torch.randn(9000, 3)]
        """, {"layer_norm", "group_norm", "batch_norm"}),
    "tiled_reductions_with_epilogues": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()
                self.bias = nn.Parameter(torch.randn(1, 5, 1))

            def forward(self, x, v):
                # strided (dim 1 of 3), row-wise (last dim) and outer-less (dim 0) reductions, each with the
                # pointwise ops after it fused, one with an operand broadcast to its output
                a = torch.sum(x, dim=1, keepdim=True) * 0.5
                b = torch.logsumexp(x.transpose(1, 2).contiguous(), dim=2, keepdim=True) + self.bias
                c = torch.relu(torch.mean(x, dim=-1) - 0.1)
                d = torch.amax(x, dim=0)
                # a long vector: the two-stage (split) reduction, sum of squares then the square root
                return a, b, c, d, torch.norm(v), torch.mean(v * 1.0)

        def get_inputs():
            return [torch.randn(3, 37, 5), torch.randn(20000)]
        """, {"reduce"}),
    "softmax_online_and_strided": ("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x, y, z):
                # a row longer than one tile (online max and sum, then a write pass); over channels (strided)
                # with a broadcast operand in the fused tail
                return torch.softmax(x, dim=-1), torch.log_softmax(y, dim=1) * 2.0 + z

        def get_inputs():
            return [torch.randn(2, 9000) * 4.0, torch.randn(2, 6, 3, 5), torch.randn(6, 1, 1)]
        """, {"softmax", "log_softmax"}),
}
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
FOOTER = "\n\ndef get_init_inputs():\n    return []\n"


def _problem_text(body: str) -> str:
    text = HEADER + textwrap.dedent(body)
    return text if "def get_init_inputs" in text else text + FOOTER


def _run_interpreted(solution: str, tmp_path: Path, trials: int = 2) -> dict:
    """ModelNew against Model in a subprocess under TRITON_INTERPRET=1 (the interpreter must be set before import)."""
    path = tmp_path / "solution.py"
    path.write_text(solution, encoding="utf-8")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / 'optimizer' / 'kernelbench')!r})
        import runner
        text = open({str(path)!r}).read()
        module = runner.load_module(text, "generated_solution")
        print(json.dumps(runner.check_correctness(module, module, "cpu", trials={trials})))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(OP_PROBLEMS))
def test_every_op_class_lowers_and_matches_in_the_interpreter(case, tmp_path):
    body, classes = OP_PROBLEMS[case]
    generated = generate(load_problem(text=_problem_text(body), name=case))
    assert generated.fully_lowered, generated.fallbacks
    assert classes <= set(generated.op_classes)
    assert static_check(generated.text).ok and not static_check(generated.text).torch_ops
    result = _run_interpreted(generated.text, tmp_path)
    assert result["passed"] == result["trials"], result


def test_reductions_are_tiled_and_fuse_their_tail():
    body, _ = OP_PROBLEMS["tiled_reductions_with_epilogues"]
    generated = generate(load_problem(text=_problem_text(body), name="tiles"))
    assert "sum_mul_kernel" in generated.kernels and "mean_sub_relu_kernel" in generated.kernels
    assert "logsumexp_add_kernel" in generated.kernels
    text = generated.text
    assert "tile = tl.full([BLOCK_R, BLOCK_P]" in text  # strided: rows of the tile are contiguous in memory
    assert "tile = tl.full([BLOCK_P, BLOCK_R]" in text  # row-wise: a program takes BLOCK_P rows
    assert "FINAL=False" in text  # the two-stage path exists for few outputs over long rows


def test_row_normalizations_are_one_kernel_each():
    body, _ = OP_PROBLEMS["row_normalizations"]
    generated = generate(load_problem(text=_problem_text(body), name="norms"))
    # rms: pow -> mean -> add -> sqrt -> div; l2: norm -> div; centering: mean -> sub; abs -> max -> div
    assert generated.op_classes == ["normalize"] and len(generated.kernels) == 4, generated.kernels
    assert "ONE_PASS=BLOCK_R >= R" in generated.text


def test_matmul_tiles_grouped_order_and_dot_precision():
    body, _ = OP_PROBLEMS["matmul_flatten_transposed"]
    problem = load_problem(text=_problem_text(body), name="mm")
    text = generate(problem).text
    assert 'input_precision="tf32x3"' in text and "GROUP_M=8" in text and "num_stages=3" in text
    assert text.count("def gemm_tiles(") == 1  # one host helper shared by every GEMM of the file
    assert 'input_precision="ieee"' in generate(problem, fp32_dot="ieee").text
    namespace: dict = {}
    exec(text.split("@triton.jit")[0].split("import triton.language as tl")[1], {"triton": __import__("triton")},
         namespace)
    gemm_tiles = namespace["gemm_tiles"]
    assert gemm_tiles(4096, 4096) == (128, 128, 32, 8)  # large: 128x128, 8 warps
    block_m, block_n, _, warps = gemm_tiles(256, 256)  # 4 programs at 128x128: smaller tiles fill the GPU
    assert block_m * block_n < 128 * 128 and warps == 4
    assert gemm_tiles(2048, 1)[1] == 16  # tl.dot needs 16 columns at least


@pytest.mark.slow
def test_generated_kernels_compile_for_h200_without_spills():
    """The interpreter does not check Triton's typing rules (a loop-carried variable may not change type): compile
    the GEMM, both convolution paths and the tile kernels for sm_90 as the GPU would."""
    from mtmc_lsp.optimizer.compile.compiler import CompileJob, compile_jobs
    from mtmc_lsp.optimizer.hardware import resolve_target

    cases = [("conv_window_outer", "conv2d_tanh_kernel", {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, 8),
             ("matmul_flatten_transposed", "linear_kernel", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32,
                                                             "GROUP_M": 8}, 8),
             ("softmax_online_and_strided", "log_softmax_mul_add_kernel", {"BLOCK_P": 16, "BLOCK_R": 256}, 4),
             ("row_normalizations", "pow_mean_add_chain_kernel", {"BLOCK_P": 16, "BLOCK_R": 256, "SQUARE": False}, 4),
             ("norms_two_pass", "group_norm_kernel", {"BLOCK_P": 1, "BLOCK_R": 4096}, 8),
             ("tiled_reductions_with_epilogues", "logsumexp_add_kernel", {"BLOCK_P": 16, "BLOCK_R": 256}, 4)]
    for case, kernel, constexprs, warps in cases:
        text = generate(load_problem(text=_problem_text(OP_PROBLEMS[case][0]), name=case)).text
        flags = [f for f in ("WINDOW_OUTER", "ONE_PASS", "FINAL") if f"{f}: tl.constexpr" in text]
        jobs = [CompileJob(kernel, {**constexprs, **{f: value for f in flags}}, warps, 3, None, str(value))
                for value in (True, False)]
        for report in compile_jobs(solution_part(text), jobs, resolve_target("h200"), timeout_s=600, cache_dir=None):
            assert report.status == "ok", (case, report.label, report.error)
            assert not report.spill_stores, (case, report.label, report.spill_stores)


def test_sample_is_stratified_by_op_class_and_reproducible():
    from mtmc_lsp.optimizer.kernelbench.evaluate import problem_class, sample_problems

    names = ([f"{i}_Matmul_case" for i in range(1, 11)] + [f"{i}_conv_standard_2D" for i in range(11, 21)]
             + [f"{i}_ReLU" for i in range(21, 26)] + ["26_Softmax"])
    files = [Path(f"{n}.py") for n in names]
    chosen = sample_problems(files, 1, 8, seed=3)
    assert len(chosen) == 8 and chosen == sample_problems(files, 1, 8, seed=3)
    classes = [problem_class(1, p.stem) for p in chosen]
    assert classes.count("matmul") == 3 and classes.count("conv") == 3 and "softmax" in classes
    assert sample_problems(files, 1, 8, seed=4) != chosen or len(set(names)) == 8
    assert sample_problems(files, 1, 0, seed=3) == files
    assert problem_class(2, "12_Gemm_Multiply_LeakyReLU") == "gemm"
    assert problem_class(2, "2_ConvTranspose2d_BiasAdd") == "conv_transpose"
    assert problem_class(1, "57_conv_transposed_2D__square_input") == "conv_transpose"


def test_problem_folder_traces_and_lowers_with_readable_kernels():
    files = discover_problems(PROBLEMS, 1) + discover_problems(PROBLEMS, 2)
    assert len(files) == 10
    expected = {"1_Matmul": ["matmul_kernel"], "1_Linear_BiasAdd_ReLU": ["linear_add_relu_kernel"],
                "2_Matmul_Scale_GELU": ["matmul_mul_gelu_kernel"], "3_BMM_Softmax": ["bmm_kernel", "softmax_kernel"],
                "4_Conv2d_ReLU_BiasAdd": ["conv2d_relu_add_kernel"]}
    for path in files:
        generated = generate(load_problem(path))
        if path.stem in expected:
            assert generated.kernels == expected[path.stem]
        text = generated.text
        for kernel in generated.kernels:  # each kernel has its comment and a host function
            assert f"# {kernel}: " in text and f"def run_{kernel[: -len('_kernel')]}(" in text
        assert "class ModelNew(nn.Module):" in text and REFERENCE_MARKER in text
        assert "super().__init__()" in solution_part(text)


def test_fused_groups_epilogue_and_fallback_comment():
    problem = load_problem(PROBLEMS / "level2" / "5_Gemm_Triu_Tanh.py")
    generated = generate(problem)
    assert generated.kernels == ["linear_kernel", "tanh_kernel"]
    assert generated.fallbacks == [("triu", "no Triton lowering yet for triu")]
    assert "# PyTorch: no Triton lowering yet for triu" in generated.text
    assert "Still PyTorch calls" in generated.text
    assert static_check(generated.text).torch_ops == ["torch.triu"]
    traced = trace_problem(load_problem(PROBLEMS / "level2" / "1_Linear_BiasAdd_ReLU.py"))
    groups, _ = group_nodes(traced.graph_module)
    assert [g.ops() for g in groups] == [["linear", "add", "relu"]]


def test_a_value_with_two_users_ends_its_group():
    text = _problem_text("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x):
                y = torch.relu(x)
                return torch.sigmoid(y) + y.sum(dim=1, keepdim=True)

        def get_inputs():
            return [torch.randn(4, 8)]
        """)
    lowering = lower(trace_problem(load_problem(text=text)).graph_module)
    assert [g.ops() for g in lowering.groups] == [["relu"], ["sigmoid", "add"], ["sum"]]


def test_tracing_uses_fake_inputs_for_huge_problems():
    text = _problem_text("""
        class Model(nn.Module):
            def __init__(self):
                super(Model, self).__init__()

            def forward(self, x):
                return torch.softmax(x, dim=1)

        batch_size = 4096
        dim = 393216

        def get_inputs():
            return [torch.rand(batch_size, dim)]
        """)
    traced = trace_problem(load_problem(text=text))  # 6 GB if it were real
    shapes = [n.meta["tensor_meta"].shape for n in traced.graph_module.graph.nodes if n.op == "placeholder"]
    assert list(shapes[0]) == [4096, 393216]
    small = shrink_sizes(text)
    assert "batch_size = 64" in small and "dim = 48" in small


def test_shrink_keeps_equal_sizes_equal_and_small_ones():
    text = "a = 4096\nb = 4096\nk = 3\nshape = (32768, 5)\n"
    assert shrink_sizes(text) == "a = 64\nb = 64\nk = 3\nshape = (64, 5)\n"


# -- static checks ---------------------------------------------------------------------------------

GOOD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def k(x_ptr):
    tl.store(x_ptr, 1.0)

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        k[(1,)](x)
        return x
"""


def test_static_check_passes_a_clean_solution_and_ignores_the_copied_reference():
    reference = "\n" + REFERENCE_MARKER + "\nclass Model(nn.Module):\n    def forward(self, x):\n        try:\n            pass\n" \
                "        except Exception:\n            return torch.relu(x)\n"
    report = static_check(GOOD + reference)
    assert report.ok and report.torch_ops == []


@pytest.mark.parametrize("edit, error", [
    (("        k[(1,)](x)\n", "        try:\n            k[(1,)](x)\n        except Exception:\n            x = torch.relu(x)\n"),
     "try/except"),
    (("class ModelNew(nn.Module):", "class ModelNew(Model):"), "inherits from the reference"),
    (("        k[(1,)](x)\n", "        pass\n"), "'pass' statement"),
    (("@triton.jit\n", ""), "no @triton.jit kernel"),
])
def test_static_check_refuses_bypasses(edit, error):
    report = static_check(GOOD.replace(*edit))
    assert any(error in e for e in report.errors), report.errors


def test_static_check_counts_pytorch_compute_ops():
    text = GOOD.replace("        return x\n", "        y = self.fc(x)\n        y = torch.softmax(y, dim=1)\n"
                        "        return F.gelu(y) + y.cumsum(1) + torch.matmul(y, y).view(-1).reshape(2, -1)"
                        " + torch._C._nn.scaled_dot_product_attention(y, y, y)\n")
    assert sorted(static_check(text).torch_ops) == sorted([
        "nn.Linear", "torch.softmax", "F.gelu", "Tensor.cumsum", "torch.matmul", "torch._C._nn.scaled_dot_product_attention"])


# -- scores ----------------------------------------------------------------------------------------

def _row(name, correct=True, eager=None, compile_=None, triton=None, level=1, torch_ops=()):
    return ProblemResult(level, name, "ok", correct=correct, eager_ms=eager, compile_ms=compile_, triton_ms=triton,
                         torch_ops=list(torch_ops))


def test_fast_p_counts_incorrect_problems_as_not_fast():
    rows = [_row("a", eager=3.0, compile_=1.0, triton=1.0),       # 3x eager, 1x compile
            _row("b", eager=1.0, compile_=2.5, triton=0.5),       # 2x eager (not > 2), 5x compile
            _row("c", correct=False, eager=10.0, compile_=10.0, triton=1.0),  # fast but wrong
            _row("d", eager=1.0, compile_=1.0, triton=2.0)]       # 0.5x
    assert fast_p(rows, 0) == 0.75
    assert fast_p(rows, 1.0, "eager") == 0.5
    assert fast_p(rows, 2.0, "eager") == 0.25
    assert fast_p(rows, 1.0, "compile") == 0.25
    assert fast_p(rows, 2.0, "compile") == 0.25
    arith, geo, n = mean_speedups(rows, "eager")
    assert n == 3 and arith == pytest.approx((3 + 2 + 0.5) / 3) and geo == pytest.approx((3 * 2 * 0.5) ** (1 / 3))
    arith_c, _, n_c = mean_speedups(rows, "compile")
    assert n_c == 3 and arith_c == pytest.approx((1 + 5 + 0.5) / 3)


def test_summary_per_level_with_pytorch_ops_counted_apart_and_untimed_runs():
    rows = [_row("a", eager=2.0, compile_=1.0, triton=1.0), _row("b", eager=1.0, compile_=1.0, triton=0.5,
                                                                 torch_ops=["torch.cumsum"]),
            _row("c", level=2), _row("d", level=2, correct=False)]
    summary = summarize(rows)
    l1, l2 = summary["level1"], summary["level2"]
    assert (l1["problems"], l1["correct"], l1["fully_triton"], l1["with_pytorch_ops"]) == (2, 2, 1, 1)
    assert l1["all"]["eager"]["fast_1"] == 1.0 and l1["fully_triton_only"]["eager"]["fast_2"] == 0.0
    assert l1["all"]["eager"]["mean_speedup"] == pytest.approx(2.0)
    assert l2["all"]["eager"]["fast_0"] == 0.5
    assert l2["all"]["eager"]["fast_1"] is None and l2["all"]["eager"]["mean_speedup"] is None  # CPU: not timed


def test_speedup_needs_correctness_and_both_times():
    assert _row("a", correct=False, eager=2.0, triton=1.0).speedup("eager") is None
    assert _row("a", eager=2.0, triton=None).speedup("eager") is None
    assert _row("a", eager=2.0, compile_=None, triton=1.0).speedup("compile") is None
    assert _row("a", eager=2.0, triton=1.0).speedup("eager") == 2.0


# -- the command -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_command_cpu_runs_and_resumes(tmp_path):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "mtmc_lsp", "kernelbench", "--problems", str(PROBLEMS), "--level", "1",
            "--cpu", "--out", str(out), "--only", "ReLU", "--only", "Softmax"]
    first = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "[2/2]" in first.stdout
    rows = load_results(out / "results.jsonl")
    assert sorted(rows) == ["level1/2_ReLU", "level1/3_Softmax"]
    assert all(r.correct and r.trials == 5 and r.trials_passed == 5 for r in rows.values())
    assert (out / "solutions" / "level1" / "2_ReLU_triton.py").is_file()
    report = (out / "report.md").read_text()
    assert "| level1/3_Softmax | ok | 5/5 |" in report
    again = subprocess.run(args[:-4] + ["--only", "ReLU", "--only", "Softmax", "--only", "LayerNorm", "--resume"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "1 problems to run (2 already in" in again.stdout
    assert sorted(load_results(out / "results.jsonl")) == ["level1/2_ReLU", "level1/3_Softmax", "level1/4_LayerNorm"]


def test_a_wrong_solution_is_incorrect(tmp_path):
    generated = generate(load_problem(PROBLEMS / "level1" / "2_ReLU.py"))
    wrong = generated.text.replace("tl.maximum(x_in, 0.0)", "tl.maximum(x_in, 0.01)")
    assert wrong != generated.text
    result = _run_interpreted(wrong, tmp_path, trials=1)
    assert result["passed"] == 0 and "differ" in result["issue"]


def test_timing_times_eager_compile_and_model_new_on_the_same_inputs(monkeypatch):
    """The timing plumbing without a GPU: do_bench and torch.compile stand in, the calls are counted."""
    import triton.testing

    sys.path.insert(0, str(ROOT / "optimizer" / "kernelbench"))
    import runner

    calls: list[str] = []

    class Problem:
        class Model(torch.nn.Module):
            def forward(self, x):
                calls.append("eager")
                return x + 1

        @staticmethod
        def get_inputs():
            return [torch.randn(4)]

        @staticmethod
        def get_init_inputs():
            return []

    class Solution:
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                calls.append("new")
                return x + 1

    def compiled(model):
        def run(*args):
            calls.append("compiled")
            return model(*args)
        return run

    times = iter([2.0, 1.0, 1.5])
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: (fn(), next(times))[1])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch, "compile", compiled)
    timing = runner.time_models(Problem, Solution, "cpu")
    assert (timing["eager_ms"], timing["triton_ms"], timing["compile_ms"]) == (2.0, 1.0, 1.5)
    assert calls == ["eager", "eager", "new", "new", "compiled", "eager", "compiled", "eager"]


def test_prewarm_job_calls_the_model_once_and_scores_nothing(tmp_path):
    solution = generate(load_problem(PROBLEMS / "level2" / "1_Linear_BiasAdd_ReLU.py")).text
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"key": "p", "problem_text": solution, "solution_text": solution, "cpu": True,
                                 "prewarm": True, "compile_baseline": False}]))
    subprocess.run([sys.executable, str(ROOT / "optimizer" / "kernelbench" / "runner.py"), str(jobs),
                    str(tmp_path / "out.jsonl")], env=env, check=True, timeout=240)
    result = json.loads((tmp_path / "out.jsonl").read_text())
    assert result["status"] == "prewarmed" and "correctness" not in result, result


def test_budget_stops_between_problems_and_leaves_the_rest_for_resume(tmp_path):
    from mtmc_lsp.optimizer.kernelbench.evaluate import run_jobs

    jobs = []
    for name in ("2_ReLU", "3_Softmax"):
        path = PROBLEMS / "level1" / f"{name}.py"
        jobs.append({"key": f"level1/{name}", "problem_text": path.read_text(),
                     "solution_text": generate(load_problem(path)).text, "cpu": True, "timing": False, "trials": 1})
    # the worker runs a job only before the run's deadline: here the second one's has passed
    jobs_file, results_file = tmp_path / "jobs.json", tmp_path / "results.jsonl"
    jobs_file.write_text(json.dumps([{**jobs[0], "deadline": None}, {**jobs[1], "deadline": 1.0}]))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    runner_py = ROOT / "optimizer" / "kernelbench" / "runner.py"
    subprocess.run([sys.executable, str(runner_py), str(jobs_file), str(results_file)], env=env, timeout=240, check=True)
    results = [json.loads(line) for line in results_file.read_text().splitlines()]
    assert [r["key"] for r in results] == ["level1/2_ReLU"] and results[0]["correct"]
    # a spent budget starts no worker and hands every job back for --resume
    seen: list[dict] = []
    assert run_jobs(jobs, True, 120, seen.append, budget_left=lambda: 0.0) == ["level1/2_ReLU", "level1/3_Softmax"]
    assert seen == []


def test_committed_rows_carry_no_directories():
    from mtmc_lsp.optimizer.kernelbench.evaluate import apply_result

    row = apply_result(ProblemResult(1, "x", "pending"), {
        "status": "crash", "error": 'worker crash; File "/home/u/.venv/lib/python3.12/site-packages/torch/nn/x.py", line 3'})
    assert row.error == 'worker crash; File "x.py", line 3' and not row.correct


def test_the_split_is_fixed_by_problem_number_and_halves_every_level():
    from mtmc_lsp.optimizer.kernelbench.split import EVAL, TRAIN, in_split, problem_number, split_of

    assert (problem_number("23_Softmax.py"), split_of("23_Softmax.py"), split_of("level2/100_ConvTranspose3d.py")) == (
        23, TRAIN, EVAL)
    names = [Path(f"{n}_Op.py") for n in range(1, 101)]
    assert len(in_split(names, TRAIN)) == len(in_split(names, EVAL)) == 50
    assert not set(in_split(names, TRAIN)) & set(in_split(names, EVAL)) and in_split(names, "all") == names
    with pytest.raises(ValueError):
        split_of("Softmax.py")


@pytest.mark.slow
def test_the_loop_runs_on_lowered_problems_side_by_side_and_records_each_split(tmp_path):
    """--optimize-steps with two processes: each problem optimized, scored, its attempts recorded by split."""
    from mtmc_lsp.cli import main

    problems = Path(__file__).parent / "kernelbench_problems"
    code = main(["kernelbench", "--problems", str(problems), "--level", "1", "--cpu", "--only", "2_ReLU",
                 "--only", "5_Sum", "--optimize-steps", "1", "--optimize-processes", "2", "--optimize-budget-s", "60",
                 "--out", str(tmp_path)])
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["name"] for r in rows} == {"2_ReLU", "5_Sum_reduction_over_a_dimension"}
    assert all(r["correct"] for r in rows)
    assert all((tmp_path / "solutions" / "level1" / f"{r['name']}_lowered.py").is_file() for r in rows)
    begins = [json.loads(path.read_text().splitlines()[0]) for path in (tmp_path / ".mtmc" / "trajectories").glob("*.jsonl")]
    marked = {Path(b["file"]).name: bool(b.get("evaluation")) for b in begins}
    assert marked == {"2_ReLU_triton.py": True, "5_Sum_reduction_over_a_dimension_triton.py": False}
