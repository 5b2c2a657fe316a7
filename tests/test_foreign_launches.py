"""Kernels launched from another module: their launches are found beside the file and feed the checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.analysis.workspace import MAX_BYTES, with_foreign_launches
from mtmc_lsp.optimizer.checks import run_checks
from mtmc_lsp.optimizer.hardware import get_profile

KERNELS = '''import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def unused_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)
'''

OPS = '''import torch
import triton
from IMPORT


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    CALLEE[(triton.cdiv(n, 256),)](x, out, n, BLOCK_SIZE=BLOCK)
    return out
'''


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def foreign(kernels_path: Path):
    return with_foreign_launches(analyze(kernels_path.read_text(), str(kernels_path)))


def test_launches_in_a_sibling_module_are_found_with_their_values(tmp_path):
    kernels = write(tmp_path, "kernels.py", KERNELS)
    write(tmp_path, "ops.py", OPS.replace("IMPORT", ".kernels import scale_kernel as _scale")
          .replace("CALLEE", "_scale").replace("BLOCK)", "256)"))
    write(tmp_path, "unrelated.py", "import torch\n\n\ndef scale_kernel():\n    return 1\n")
    analysis = foreign(kernels)
    assert analysis.launches == []  # the file itself launches nothing; actions see no launch
    (launch,) = analysis.foreign_launches
    assert launch.kernel == "scale_kernel" and Path(launch.file).name == "ops.py" and launch.host_function == "scale"
    assert launch.constexpr_values(analysis.kernel("scale_kernel")) == {"BLOCK_SIZE": 256}


def test_package_layouts_and_module_imports(tmp_path):
    for package in ("pkg", "pkg/kernels", "pkg/ops"):
        write(tmp_path / package, "__init__.py", "")
    write(tmp_path / "pkg" / "not_a_package", "stray.py", OPS.replace("IMPORT", "pkg.kernels.scale import *")
          .replace("CALLEE", "scale_kernel").replace("BLOCK)", "64)"))  # a plain folder is not looked into
    kernels = write(tmp_path / "pkg" / "kernels", "scale.py", KERNELS)
    write(tmp_path / "pkg" / "ops", "scale_op.py", OPS.replace("from IMPORT", "from ..kernels import scale as K")
          .replace("CALLEE", "K.scale_kernel").replace("BLOCK)", "512)"))
    write(tmp_path / "pkg", "api.py", OPS.replace("IMPORT", "pkg.kernels.scale import *")
          .replace("CALLEE", "scale_kernel").replace("BLOCK)", "1024)"))
    found = sorted((Path(l.file).name, l.args[-1].value) for l in foreign(kernels).foreign_launches)
    assert found == [("api.py", 1024), ("scale_op.py", 512)]


def test_a_same_named_function_of_the_other_module_is_not_the_kernel(tmp_path):
    kernels = write(tmp_path, "kernels.py", KERNELS)
    write(tmp_path, "ops.py", OPS.replace("IMPORT", "kernels import scale_kernel").replace("CALLEE", "scale_kernel")
          .replace("BLOCK)", "256)") + "\n\ndef scale_kernel():\n    pass\n")
    assert foreign(kernels).foreign_launches == []
    # Too large a neighbour is not read at all.
    write(tmp_path, "ops.py", OPS.replace("IMPORT", "kernels import scale_kernel").replace("CALLEE", "scale_kernel")
          .replace("BLOCK)", "256)") + "#" * MAX_BYTES)
    assert foreign(kernels).foreign_launches == []


def test_the_checks_use_a_foreign_launchs_values_and_say_where_they_came_from(tmp_path):
    kernels = write(tmp_path, "kernels.py", KERNELS)
    ops = write(tmp_path, "ops.py", OPS.replace("IMPORT", "kernels import scale_kernel")
                .replace("CALLEE", "scale_kernel").replace("BLOCK)", "100)"))
    analysis = foreign(kernels)
    (finding,) = [f for f in run_checks(analysis, get_profile("h100")) if f.code == "MTMC101"]
    assert "BLOCK_SIZE=100 from the launch in ops.py line 9, scale()" in finding.message
    kernel = analysis.kernel("scale_kernel")
    assert finding.span == kernel.name_span  # a position in this file, not ops.py's
    # The same file with the neighbour fixed: nothing to report; edited on disk, the cache sees it.
    ops.write_text(ops.read_text().replace("BLOCK_SIZE=100", "BLOCK_SIZE=128"))
    os.utime(ops, ns=(ops.stat().st_atime_ns, ops.stat().st_mtime_ns + 1_000_000))
    assert not [f for f in run_checks(foreign(kernels), get_profile("h100")) if f.code == "MTMC101"]


def test_mtmc_analyze_lists_the_foreign_launch(tmp_path):
    kernels = write(tmp_path, "kernels.py", KERNELS)
    write(tmp_path, "ops.py", OPS.replace("IMPORT", "kernels import scale_kernel").replace("CALLEE", "scale_kernel")
          .replace("BLOCK)", "256)"))
    out = subprocess.run([sys.executable, "-m", "mtmc_lsp", "analyze", str(kernels), "--target", "h100"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "launch ops.py line 9 in scale: grid (triton.cdiv(n, 256),) {'BLOCK_SIZE': 256}" in out.stdout


def test_a_kernel_another_module_launches_gets_only_interface_keeping_steps(tmp_path):
    """Fusing ``add_kernel`` into ``relu_kernel`` rewrites add_kernel's store: ops.py's own launch of it
    would silently compute add + relu. Tiling the launch here changes nothing for ops.py."""
    from mtmc_lsp.optimizer.actions import applicable

    chain = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "ew_add_relu_chain.py").read_text()
    path = write(tmp_path, "chain.py", chain)

    def offered(kernel: str) -> set[str]:
        return {c.action for c in applicable(analyze(path.read_text(), str(path)), kernel, get_profile("h100"))}

    assert "fusion" in offered("add_kernel") and "tiling" in offered("add_kernel") and "fusion" in offered("relu_kernel")
    write(tmp_path, "ops.py", "import torch\nimport triton\nfrom chain import add_kernel\n\n\ndef add(x, y):\n"
          "    out = torch.empty_like(x)\n    add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK_SIZE=128)\n"
          "    return out\n")
    assert "fusion" not in offered("add_kernel") and "tiling" in offered("add_kernel")
    assert "fusion" not in offered("relu_kernel")  # the fusion would rewrite add_kernel, named as its producer


def test_mtmc_actions_says_which_kernels_other_modules_launch(tmp_path):
    kernels = write(tmp_path, "kernels.py", KERNELS)
    write(tmp_path, "ops.py", OPS.replace("IMPORT", "kernels import scale_kernel").replace("CALLEE", "scale_kernel")
          .replace("BLOCK)", "256)"))
    out = subprocess.run([sys.executable, "-m", "mtmc_lsp", "actions", str(kernels), "--target", "h100"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "scale_kernel: " in out.stdout and "(also launched in ops.py: only steps that keep its interface)" in out.stdout
    assert "unused_kernel: " in out.stdout and out.stdout.count("also launched in") == 1


def test_mtmc_apply_refuses_a_step_that_would_change_a_kernel_another_module_launches(tmp_path):
    chain = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "ew_add_relu_chain.py").read_text()
    path = write(tmp_path, "chain.py", chain)
    write(tmp_path, "ops.py", "import triton\nfrom chain import add_kernel\n\n\ndef add(x, y, out):\n"
          "    add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK_SIZE=128)\n")
    command = [sys.executable, "-m", "mtmc_lsp", "apply", str(path), "--kernel", "add_kernel", "--target", "h100"]
    out = subprocess.run(command + ["--action", "fusion", "--param", "consumer=relu_kernel"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "add_kernel is also launched in ops.py (line 6); fusion would change it there too" in out.stderr
    assert path.read_text() == chain
    tiled = subprocess.run(command + ["--action", "tiling"], capture_output=True, text=True, timeout=120)
    assert tiled.returncode == 0 and "BLOCK_SIZE=1024" in tiled.stdout
