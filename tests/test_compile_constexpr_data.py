"""Compile diagnostics take module-level constexprs as data only: every way to smuggle a callable runs nothing.

Issue 33: ``E = tl.constexpr(<a builtin looked up by subscript>)`` called in the kernel body passed the
static filter, and Triton's code generator called it at compile time. Each bypass below would write
a marker file if anything ran it; each must leave no marker and a diagnostic that names the value and
why. The worker's own check (``unsafe_global_value``) is tested on a module that skips the static rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from mtmc_lsp.optimizer.compile import compile_kernel
from mtmc_lsp.optimizer.compile.compiler import WORKER
from mtmc_lsp.optimizer.compile.module_builder import CompileSetupError, build_module
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")

KERNEL = '''
@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    E(PAYLOAD)
    tl.store(x_ptr + offsets, x * 2, mask=offsets < n)
'''


def _file(preamble: str, marker, kernel: str = KERNEL) -> str:
    payload = f"open({str(marker)!r}, 'w').close()"
    return ("import triton\nimport triton.language as tl\n"
            + textwrap.dedent(preamble)
            + kernel.replace("PAYLOAD", repr(payload)))


# (what the file does at module level, words the refusal must contain)
BYPASSES = {
    "the issue: a builtin by subscript": ("E = tl.constexpr(__builtins__['exec'])\n", "reads __builtins__"),
    "vars(__builtins__)": ("E = tl.constexpr(vars(__builtins__)['eval'])\n", "reads __builtins__"),
    "an alias of exec": ("f = exec\nE = tl.constexpr(f)\n", "the value of f uses exec()"),
    "an alias of another builtin": ("f = breakpoint\nE = tl.constexpr(f)\n", "reads the builtin breakpoint"),
    "a plain alias": ("E = print\n", "the value of E reads the builtin print"),
    "getattr": ("E = tl.constexpr(getattr(tl, 'core'))\n", "uses getattr()"),
    "a subscript of globals()": ("E = tl.constexpr(globals()['__builtins__']['exec'])\n", "uses globals()"),
    "__import__": ("E = tl.constexpr(__import__('os').system)\n", "uses __import__()"),
    "a module attribute chain": ("E = tl.constexpr(triton.compiler.compiler.os.system)\n",
                                 "reads triton.compiler.compiler.os.system, which is not a Triton dtype"),
    "a Triton function": ("E = tl.constexpr(triton.compile)\n", "reads triton.compile"),
    "a lambda": ("E = tl.constexpr(lambda *args: 0)\n", "(Lambda)"),
    "a closure": ("def make():\n    def run(s):\n        exec(s)\n    return run\n"
                  "E = tl.constexpr(make())\n", "calls make()"),
    "a decorator": ("def wrap(f):\n    return exec\n@wrap\ndef E():\n    pass\n",
                    "the kernel uses E, which is Python code"),
    "a default argument": ("def pick(f=exec):\n    return f\nE = tl.constexpr(pick())\n", "calls pick()"),
    "a class body": ("class Holder:\n    run = exec\nE = tl.constexpr(Holder.run)\n", "reads Holder.run"),
    "a walrus": ("E = tl.constexpr((f := print))\n", "(NamedExpr)"),
    "an f-string": ("P = 'import os'\nE = tl.constexpr(f'{exec(P)}')\n", "uses exec()"),
    "a formatted f-string": ("E = tl.constexpr(f'{2:>{3}}')\n", "(JoinedStr)"),
    "a constexpr of a constexpr": ("E = tl.constexpr(tl.constexpr(print))\n", "reads the builtin print"),
    "a tuple element": ("T = (1, print)\nE = tl.constexpr(T[1])\n", "the value of T reads the builtin print"),
    "a dict value": ("E = tl.constexpr({'f': print}['f'])\n", "reads the builtin print"),
    "a conditional": ("E = tl.constexpr(print if 1 else 2)\n", "reads the builtin print"),
    "an imported function as a value": ("from operator import methodcaller\nE = tl.constexpr(methodcaller)\n",
                                        "reads methodcaller, which the file imports"),
    "a safe name imported from elsewhere": ("from operator import methodcaller as min\nE = tl.constexpr(min('x'))\n",
                                            "calls min()"),
    "a call through a data global": ("F = 1\nE = tl.constexpr(F('x'))\n", "calls F()"),
    "unpacked keywords": ("K = {}\nE = tl.constexpr(2, **K)\n", "unpacks **K"),
    "an import of the builtins module": ("import builtins\nE = tl.constexpr(builtins.exec)\n", "importing builtins"),
}


@pytest.mark.parametrize("preamble, said", BYPASSES.values(), ids=list(BYPASSES))
def test_a_callable_constexpr_is_refused_and_nothing_runs(tmp_path, preamble, said):
    marker = tmp_path / "pwned"
    text = _file(preamble, marker)
    with pytest.raises(CompileSetupError) as error:
        build_module(text, "scale_kernel")
    assert said in str(error.value) and "never run" in str(error.value), str(error.value)
    report = compile_kernel(text, "scale_kernel", {"BLOCK": 128}, H100, cache_dir=None, timeout_s=60)
    assert report.status == "skipped" and said in report.error
    assert not marker.exists()


def test_a_jit_helper_that_calls_such_a_global_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    kernel = KERNEL.replace("    E(PAYLOAD)\n", "    helper()\n") + '''

@triton.jit
def helper():
    E(PAYLOAD)
'''
    text = _file("E = tl.constexpr(__builtins__['exec'])\n", marker, kernel)
    report = compile_kernel(text, "scale_kernel", {"BLOCK": 128}, H100, cache_dir=None, timeout_s=60)
    assert report.status == "skipped" and "__builtins__" in report.error and "E" in report.error
    assert not marker.exists()


@pytest.mark.parametrize("kernel_change, said", [
    (("BLOCK: tl.constexpr", "BLOCK: tl.constexpr, F: tl.constexpr = print"),
     "a default value of scale_kernel reads the builtin print"),
    (("@triton.jit", "@print\n@triton.jit"), "only triton.jit may decorate"),
    (("    E(PAYLOAD)", "    __builtins__['exec'](PAYLOAD)"), "scale_kernel reads __builtins__"),
], ids=["default argument", "extra decorator", "builtins in the body"])
def test_signatures_and_bodies_reach_no_builtin(tmp_path, kernel_change, said):
    marker = tmp_path / "pwned"
    kernel = KERNEL.replace(*kernel_change).replace("    E(PAYLOAD)\n", "")
    text = _file("", marker, kernel)
    report = compile_kernel(text, "scale_kernel", {"BLOCK": 128}, H100, cache_dir=None, timeout_s=60)
    assert report.status == "skipped" and said in report.error, report.error
    assert not marker.exists()


def test_a_heuristics_lambda_that_returns_a_callable_is_refused(tmp_path):
    kernel = KERNEL.replace("@triton.jit", "@triton.heuristics({'BLOCK': lambda args: print})\n@triton.jit")
    report = compile_kernel(_file("E = tl.constexpr(2)\n", tmp_path / "pwned", kernel.replace("    E(PAYLOAD)\n", "")),
                            "scale_kernel", {}, H100, cache_dir=None, timeout_s=60)
    assert report.status == "skipped" and "reads the builtin print" in report.error


def _run_worker(tmp_path, module_text: str, constexprs: dict | None = None) -> dict:
    """The compile worker on a module written here (the static rule skipped): its one result."""
    module = tmp_path / "unit.py"
    module.write_text(module_text)
    request = {"modules": [str(module)], "jobs": [{
        "module": 0, "kernel": "scale_kernel", "signature": {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": 128, **(constexprs or {})}, "arch": 90, "options": {"num_warps": 4}}]}
    out = subprocess.run([sys.executable, "-I", str(WORKER)], input=json.dumps(request), capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_imported_callable_that_the_body_calls_is_refused_by_the_worker(tmp_path):
    """``from operator import methodcaller as E`` is an allowed import; what it binds is not data."""
    marker = tmp_path / "pwned"
    report = compile_kernel(_file("from operator import methodcaller as E\n", marker), "scale_kernel", {"BLOCK": 128},
                            H100, cache_dir=None, timeout_s=60)
    assert report.status == "skipped", report
    assert "the global E that scale_kernel reads is a callable (methodcaller)" in report.error
    assert not marker.exists()


def test_the_worker_refuses_a_callable_global_by_what_it_is(tmp_path):
    """Defence in depth: a callable constexpr that got past the static rule is refused after the import."""
    marker = tmp_path / "pwned"
    result = _run_worker(tmp_path, _file("import builtins\nE = tl.constexpr(builtins.exec)\n", marker))
    assert result["status"] == "skipped", result
    assert "the global E that scale_kernel reads is a callable (exec)" in result["error"]
    assert not marker.exists()


def test_the_worker_still_compiles_data_globals(tmp_path):
    text = _file("E = tl.constexpr(2)\nD = tl.float16\nT = tl.constexpr((1, 2.0, 'x', None))\n", tmp_path / "m",
                 KERNEL.replace("    E(PAYLOAD)\n", "    y = x.to(D) * E * T[0]\n").replace("x * 2", "y"))
    result = _run_worker(tmp_path, text)
    assert result["status"] == "ok", result


def test_legitimate_values_still_compile():
    """Literals, arithmetic, dtypes, math constants and the pure calls that real files use."""
    text = _file('''
        import math
        from triton.language import float16
        LOG2E = tl.constexpr(1.0 / math.log(2.0))
        SCALE: tl.constexpr = 2 ** 1 * LOG2E
        BLOCK_DEFAULT = triton.next_power_of_2(100)
        SIZES = (16, 32, -64)
        DTYPE = tl.constexpr(tl.bfloat16)
        HALF = float16
        PI = tl.constexpr(math.pi * 2)
        LIMIT = tl.constexpr(max(SIZES[0], min(4, 8)) if SCALE > 0 else 0)
    ''', "unused", KERNEL.replace("    E(PAYLOAD)\n", "    x = x * SCALE * PI * LIMIT\n    x = x.to(DTYPE).to(HALF)\n"))
    built = build_module(text, "scale_kernel")
    assert {"SCALE", "PI", "LIMIT", "DTYPE", "HALF"} <= set(built.included)
    report = compile_kernel(text, "scale_kernel", {"BLOCK": 128}, H100, cache_dir=None, timeout_s=60)
    assert report.status == "ok", report.error
