"""Kernel analysis on the bundled examples: kernels, parameters, calls, loops, launches, spans."""

from pathlib import Path

import pytest

from mtmc_lsp.optimizer.analysis import Position, analyze
from mtmc_lsp.optimizer.hardware import get_profile, resolve_target

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"


def test_matmul_example_kernel_and_launch():
    analysis = analyze((EXAMPLES / "matmul.py").read_text())
    kernel = analysis.kernel("matmul_kernel")
    assert kernel is not None
    kinds = {p.name: p.kind for p in kernel.params}
    assert kinds["a_ptr"] == "pointer" and kinds["stride_am"] == "scalar" and kinds["BLOCK_K"] == "constexpr"
    assert [c.op for c in kernel.calls_of("dot")] == ["dot"]
    assert kernel.calls_of("dot")[0].loop_depth == 1
    assert all(c.has_mask for c in kernel.calls_of("load", "store"))
    (launch,) = analysis.launches_of("matmul_kernel")
    assert launch.host_function == "matmul"
    assert launch.num_warps == 4 and launch.num_stages == 1
    assert launch.constexpr_values(kernel) == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}


def test_spellings_of_jit_and_autotune():
    text = '''
from triton import jit, autotune, Config
import triton.language as language

CONFIGS = [Config({"BLOCK": 128}, num_warps=4, num_stages=2), Config({"BLOCK": 256}, num_warps=8)]

@autotune(configs=CONFIGS, key=["n"])
@jit(do_not_specialize=["n"])
def k1(x_ptr, n, BLOCK: language.constexpr):
    offs = language.program_id(0) * BLOCK + language.arange(0, BLOCK)
    language.store(x_ptr + offs, language.load(x_ptr + offs) * 2)

def not_a_kernel(x):
    return x
'''
    analysis = analyze(text)
    assert [k.name for k in analysis.kernels] == ["k1"]
    kernel = analysis.kernels[0]
    assert kernel.jit_kwargs == {"do_not_specialize": '["n"]'}
    assert kernel.autotune is not None and kernel.autotune.key == ["n"]
    assert [(c.kwargs, c.num_warps, c.num_stages) for c in kernel.autotune.configs] == [
        ({"BLOCK": 128}, 4, 2), ({"BLOCK": 256}, 8, None)
    ]
    assert not any(c.has_mask for c in kernel.calls_of("load", "store"))


def test_utf16_positions_after_astral_characters():
    text = 's = "😀😀"; import triton\n@triton.jit\ndef k(x_ptr):\n    pass  # 😀\n'
    analysis = analyze(text)
    kernel = analysis.kernels[0]
    assert kernel.name_span.start == Position(2, 4)
    line0 = analyze('x = "😀"; y = 1\n').text.splitlines()[0]
    assert line0.startswith("x")


def test_syntax_error_keeps_last_good_analysis():
    good = analyze((EXAMPLES / "softmax.py").read_text())
    broken = analyze("import triton\n@triton.jit\ndef k(:\n", previous=good)
    assert broken.syntax_error is not None and broken.stale
    assert broken.syntax_error.span.start.line == 2
    assert [k.name for k in broken.kernels] == ["softmax_kernel"]


@pytest.mark.parametrize("text", ["", "\x00", "def f(:", "x = (" * 200, "print('hello')\n"])
def test_bad_input_never_raises(text):
    analysis = analyze(text)
    assert analysis.kernels == []


def test_hardware_profiles_and_default_target():
    assert get_profile("NVIDIA H200").max_shared_per_block == 227 * 1024
    assert get_profile("a100").sm_count == 108
    assert resolve_target("").key in {"h100", "h200", "a100", "v100", "l40s", "rtx4090", "b200"}
    with pytest.raises(KeyError, match="known targets"):
        get_profile("tpu")


def test_launch_arguments_after_star_args_and_kernel_params_named_like_options():
    text = '''
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr, num_stages: tl.constexpr):
    pass

def host(x, y, extra):
    k[(1,)](x, *extra, 7, BLOCK=64, num_stages=2, num_warps=4)
'''
    (launch,) = analyze(text).launches
    assert [a.param for a in launch.args if not a.keyword] == ["x_ptr", None, None]
    assert launch.arg("num_stages").value == 2 and launch.num_stages is None
    assert launch.num_warps == 4 and launch.arg("num_warps") is None


def test_source_text_of_nodes_matches_their_spans_on_mixed_ascii_lines():
    import ast

    from mtmc_lsp.optimizer.analysis import SourceMap

    text = 'x = "é" + f(a, b)\ny = "𝒳𝒳" ; z = g(y)[0]\nw = (1 +\n     2)\nv = h(k=1)\n'
    source_map = SourceMap(text)
    nodes = [n for n in ast.walk(ast.parse(text)) if hasattr(n, "lineno")]
    assert len(nodes) > 20
    for node in nodes:
        assert source_map.text_of(node) == source_map.span(node).text(text) == ast.get_source_segment(text, node)
    # A UTF-16 column after astral characters still counts them twice on the fast path's neighbours.
    call = next(n for n in nodes if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "g")
    assert source_map.span(call).start.character == len('y = "𝒳𝒳" ; z = ') + 2


def test_kernel_node_is_kept_but_not_part_of_the_model_value():
    text = (EXAMPLES / "matmul.py").read_text()
    first, second = analyze(text), analyze(text)
    kernel = first.kernel("matmul_kernel")
    assert kernel.node is not None and kernel.node.name == "matmul_kernel"
    assert kernel.node is not second.kernel("matmul_kernel").node and first == second
    assert "node=" not in repr(kernel)


def test_launch_spelled_with_an_nfkc_equivalent_name_is_found():
    text = (EXAMPLES / "matmul.py").read_text()
    spelled = text.replace("matmul_kernel[grid]", "\uff4datmul_kernel[grid]")  # fullwidth m: NFKC -> "m"
    assert spelled != text
    assert [l.kernel for l in analyze(spelled).launches] == [l.kernel for l in analyze(text).launches] == ["matmul_kernel"]


def test_form_feeds_and_unicode_line_separators_do_not_shift_lines():
    text = 'import triton\n\x0c\n# a comment with \u2028 inside\n@triton.jit\ndef k(x_ptr):\n    pass\n'
    (kernel,) = analyze(text).kernels
    assert kernel.name_span.start == Position(4, 4)
    assert kernel.name_span.text(text) == "k"


JITTED_BY_CALL = '''import triton
import triton.language as tl


def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


scale = triton.jit(scale)


def _shift(x_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + shift, mask=offs < n)


shift_kernel = triton.jit(do_not_specialize=["shift"])(_shift)


def _square(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) ** 2, mask=offs < n)


square = triton.heuristics({"BLOCK": lambda args: 256})(triton.autotune(
    configs=[triton.Config({}, num_warps=2), triton.Config({}, num_warps=4)], key=["n"])(triton.jit(_square)))


def helper(x):
    return x


not_a_kernel = triton.autotune(configs=[], key=["n"])(helper)  # autotune needs a jitted function
also_not = print(helper)


def run(x):
    n = x.numel()
    scale[(triton.cdiv(n, 128),)](x, n, BLOCK=128)
    shift_kernel[(triton.cdiv(n, 128),)](x, n, 1.0, BLOCK=128)
    square[(triton.cdiv(n, 256),)](x, n)
'''


def test_kernels_jitted_by_a_call_are_found_with_their_wrappers_and_launches():
    analysis = analyze(JITTED_BY_CALL)
    assert [k.name for k in analysis.kernels] == ["scale", "_shift", "_square"]
    scale, shift, square = analysis.kernels
    assert scale.jit_call.text(JITTED_BY_CALL) == "scale = triton.jit(scale)" and scale.launch_names == []
    assert [d.name for d in scale.decorators] == ["jit"] and not scale.plain_spelling
    assert scale.span.start == scale.def_span.start  # the def, not the statement below it
    assert shift.launch_names == ["shift_kernel"] and shift.jit_kwargs == {"do_not_specialize": '["shift"]'}
    assert [d.name for d in square.decorators] == ["heuristics", "autotune", "jit"]
    assert square.autotune.key == ["n"] and [c.num_warps for c in square.autotune.configs] == [2, 4]
    assert square.heuristics == {"BLOCK": "lambda args: 256"} and square.launch_names == ["square"]
    assert [(l.kernel, l.host_function) for l in analysis.launches] == [("scale", "run"), ("_shift", "run"), ("_square", "run")]
    assert analysis.launches[1].constexpr_values(shift) == {"BLOCK": 128}
    assert analysis.launches[1].arg("shift").source == "1.0"


def test_a_def_jitted_inside_a_function_keeps_its_names_local():
    text = '''import triton
import triton.language as tl


def build():
    def body(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

    k = triton.jit(body)
    return k


def other(x, k):
    k[(1,)](x, BLOCK=16)  # a parameter named k, not the kernel
'''
    analysis = analyze(text)
    (kernel,) = analysis.kernels
    assert kernel.name == "body" and kernel.enclosing_function == "build" and kernel.launch_names == []
    assert kernel.factories == ["build"]  # ``return k`` hands back the jitted body
    assert analysis.launches == []


KERNEL_FACTORIES = '''import functools

import triton
import triton.language as tl


def make_fill(value):
    @triton.jit
    def fill_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.full([BLOCK], VALUE, tl.float32), mask=offs < n)

    VALUE = tl.constexpr(value)
    return fill_kernel


@functools.lru_cache(maxsize=None)
def cached_fill(value):
    def inner():
        return make_fill(value)

    return inner()


def choose(flag):
    if flag:
        return make_fill(1.0)
    return None


zeros = make_fill(0.0)


def run(x, kernel=None):
    n = x.numel()
    fill = make_fill(2.0)
    fill[(triton.cdiv(n, 128),)](x, n, BLOCK=128)
    make_fill(3.0)[(triton.cdiv(n, 64),)](x, n, BLOCK=64)
    cached_fill(4.0)[(triton.cdiv(n, 32),)](x, n, BLOCK=32)
    zeros[(triton.cdiv(n, 16),)](x, n, BLOCK=16)
    kernel[(1,)](x, n, BLOCK=8)  # a parameter: unknown
    again = make_fill(5.0)
    again = None
    again[(1,)](x, n, BLOCK=4)  # rebound: unknown
'''


def test_kernels_returned_by_factories_are_launched_through_their_results():
    analysis = analyze(KERNEL_FACTORIES)
    (kernel,) = analysis.kernels
    assert kernel.factories == ["cached_fill", "make_fill"]  # choose() may return None: not a factory
    assert kernel.launch_names == ["zeros"]
    blocks = [l.constexpr_values(kernel)["BLOCK"] for l in analysis.launches_of("fill_kernel")]
    assert blocks == [128, 64, 32, 16]
    assert {l.host_function for l in analysis.launches} == {"run"}
    assert analysis.host_function("run").launches == ["fill_kernel"]


def test_a_kernel_tuned_again_under_its_own_name_is_one_autotuned_kernel():
    text = '''import triton
import triton.language as tl


def f(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)


f = triton.jit(f)
f = triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=["n"])(f)
tuned = triton.autotune(configs=[triton.Config({"BLOCK": 256})], key=["n"])(f)  # f stays launchable untuned


def run(x):
    f[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
'''
    (kernel,) = analyze(text).kernels
    assert [d.name for d in kernel.decorators] == ["autotune", "jit"] and kernel.launch_names == []
    assert [c.kwargs for c in kernel.autotune.configs] == [{"BLOCK": 128}]
    assert kernel.jit_call.text(text) == "f = triton.jit(f)"
