"""Compiling for the target never runs the file's code: module-level values are data or unknown."""

from __future__ import annotations

import textwrap

import pytest

from mtmc_lsp.optimizer.compile import compile_kernel
from mtmc_lsp.optimizer.compile.module_builder import CompileSetupError, build_module
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")

KERNEL = '''
@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(x_ptr + offsets, x * SCALE, mask=offsets < n)
'''


def _file(preamble: str, kernel: str = KERNEL) -> str:
    return "import triton\nimport triton.language as tl\n" + textwrap.dedent(preamble) + kernel


def _compile(text: str, **constexprs):
    return compile_kernel(text, "scale_kernel", {"BLOCK": 128, **constexprs}, H100, cache_dir=None, timeout_s=60)


def test_the_issue_constexpr_that_writes_a_file_is_not_run(tmp_path):
    planted = tmp_path / "pwned"
    text = _file(f'SCALE = tl.constexpr((open({str(planted)!r}, "w").close(), 2)[1])\n')
    report = _compile(text)
    assert report.status == "skipped"
    assert "open()" in report.error and "never run" in report.error
    assert not planted.exists()


@pytest.mark.parametrize("preamble, said", [
    ("import helpers\nSCALE = helpers.SCALE\n", "importing helpers"),
    ("from .helpers import SCALE\n", "relative import"),
    ("import os\nSCALE = tl.constexpr(int(os.environ['X']))\n", "importing os"),
    ("SCALE = tl.constexpr(2).__class__(3)\n", "private attribute"),
    ("SCALE = [i for i in range(2)]\n", "ListComp"),
    ("class Config:\n    pass\nSCALE = Config\n", "Python code"),
    ("def make():\n    return 2\nSCALE = make()\n", "calls make()"),
    ("SCALE = eval('2')\n", "uses eval()"),
])
def test_module_level_code_is_refused_before_any_import(preamble, said):
    with pytest.raises(CompileSetupError) as error:
        build_module(_file(preamble), "scale_kernel")
    assert said in str(error.value) and "never run" in str(error.value)


@pytest.mark.parametrize("kernel, said", [
    (KERNEL.replace("@triton.jit", "@triton.jit(do_not_specialize=[print('x')])"), "calls print()"),
    (KERNEL.replace("BLOCK: tl.constexpr", "BLOCK: tl.constexpr = len(open('f').read())"), "open()"),
    (KERNEL.replace("x * SCALE", "x * getattr(tl, 'core').SCALE"), "uses getattr()"),
    (KERNEL.replace("x * SCALE", "x * SCALE.__class__"), "private attribute"),
])
def test_jit_signatures_and_bodies_run_nothing(kernel, said):
    with pytest.raises(CompileSetupError) as error:
        build_module(_file("SCALE = tl.constexpr(2)\n", kernel), "scale_kernel")
    assert said in str(error.value)


def test_data_still_compiles():
    """Literals, arithmetic, tl.constexpr and math folding are what real files use: still compiled."""
    text = _file("""
        import math
        LOG2E = tl.constexpr(1.0 / math.log(2.0))
        SCALE: tl.constexpr = 2 ** 1 * LOG2E
        BLOCK_DEFAULT = triton.next_power_of_2(100)
    """)
    built = build_module(text, "scale_kernel")
    assert "SCALE" in built.included and "open(" not in built.text
    report = _compile(text)
    assert report.status == "ok", report.error


def test_a_kernel_body_that_reaches_os_through_triton_is_not_compiled(tmp_path):
    """Triton's code generator calls what ``a.b.c()`` resolves to: the worker refuses modules outside tl."""
    planted = tmp_path / "pwned"
    kernel = KERNEL.replace("x * SCALE", f"x * triton.compiler.compiler.os.system('touch {planted}')")
    report = _compile(_file("SCALE = tl.constexpr(2)\n", kernel))
    assert report.status == "skipped", report
    assert "reaches the module" in report.error
    assert not planted.exists()


def test_a_heuristics_lambda_with_a_call_is_not_evaluated(tmp_path):
    planted = tmp_path / "pwned"
    kernel = KERNEL.replace(
        "@triton.jit", f"@triton.heuristics({{'BLOCK': lambda args: open({str(planted)!r}, 'w') and 64}})\n@triton.jit")
    text = _file("SCALE = tl.constexpr(2)\n", kernel)
    report = compile_kernel(text, "scale_kernel", {}, H100, cache_dir=None, timeout_s=60)
    assert report.status == "skipped" and "open()" in report.error
    assert not planted.exists()
