"""Autotune configs written as code: the static evaluator reads what it can prove and refuses the rest."""

from __future__ import annotations

import ast
import textwrap

import pytest
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.analysis.config_eval import ConfigsRefused, evaluate_configs, module_scope
from mtmc_lsp.optimizer.analysis.model import TritonNames

HEADER = "import triton\nimport triton.language as tl\n"


def evaluate(module: str, expression: str):
    """The configs ``expression`` evaluates to in ``module`` (as (kwargs, num_warps, num_stages) triples)."""
    tree = ast.parse(HEADER + textwrap.dedent(module))
    values, sequence = evaluate_configs(ast.parse(expression, mode="eval").body,
                                        module_scope(tree, TritonNames({"triton": "triton", "tl": "triton.language"})))
    return [(v.kwargs, v.options.get("num_warps"), v.options.get("num_stages")) for v in values], sequence


def refusal(module: str, expression: str) -> str:
    with pytest.raises(ConfigsRefused) as caught:
        evaluate(module, expression)
    return str(caught.value)


def test_a_comprehension_over_literal_lists_expands_in_python_order():
    configs, sequence = evaluate("", "[triton.Config({'BLOCK_M': bm, 'BLOCK_N': bn}, num_warps=w, num_stages=s) "
                                     "for bm in [64, 128] for bn in [32, 64] for w in [4, 8] for s in [2, 3]]")
    assert sequence == "list" and len(configs) == 16
    assert configs[0] == ({"BLOCK_M": 64, "BLOCK_N": 32}, 4, 2)
    assert configs[1] == ({"BLOCK_M": 64, "BLOCK_N": 32}, 4, 3)
    assert configs[-1] == ({"BLOCK_M": 128, "BLOCK_N": 64}, 8, 3)


def test_module_names_helpers_concatenation_and_filters():
    module = """
        SIZES = [64, 128]
        WARPS = (4, 8)

        def get_configs():
            '''The base set.'''
            stages = [2, 3]
            return [triton.Config({'BLOCK': b}, num_warps=w, num_stages=s) for b in SIZES for w in WARPS for s in stages]

        configs = get_configs() + [triton.Config({'BLOCK': 2**n}, num_warps=4) for n in range(8, 10)]
    """
    configs, _ = evaluate(module, "configs")
    assert len(configs) == 10
    assert configs[-2:] == [({"BLOCK": 256}, 4, None), ({"BLOCK": 512}, 4, None)]
    kept, _ = evaluate(module, "[c for c in configs if c.kwargs['BLOCK'] * c.num_warps >= 512 and c.num_stages != 2]")
    # num_stages defaults to 3 as in triton.Config; BLOCK * warps >= 512 keeps 64x8, 128x4, 128x8, 256x4 and 512x4.
    assert [(k["BLOCK"], w) for k, w, _s in kept] == [(64, 8), (128, 4), (128, 8), (256, 4), (512, 4)]
    assert evaluate(module, "list(c for c in get_configs() if c.num_warps == 8)")[0][0][1] == 8


def test_tuples_starred_elements_dict_spreads_and_positional_options():
    module = """
        BASE = {'GROUP_SIZE_M': 8}
        extra = (triton.Config({**BASE, 'BLOCK_K': 32}, 4, 3),)
    """
    configs, sequence = evaluate(module, "extra + (triton.Config({'BLOCK_K': 64}, num_warps=2),)")
    assert sequence == "tuple"
    assert configs == [({"GROUP_SIZE_M": 8, "BLOCK_K": 32}, 4, 3), ({"BLOCK_K": 64}, 2, None)]
    assert len(evaluate(module, "[*extra, *extra]")[0]) == 2


def test_from_triton_import_config_and_hooks_are_named_not_called():
    tree = ast.parse("from triton import Config\n\ndef hook(nargs):\n    raise SystemExit\n")
    node = ast.parse("[Config({'B': b}, pre_hook=hook) for b in (16, 32)]", mode="eval").body
    values, _ = evaluate_configs(node, module_scope(tree, TritonNames({"Config": "triton.Config"})))
    assert [v.kwargs for v in values] == [{"B": 16}, {"B": 32}]
    assert values[0].hooks == (("pre_hook", "hook"),)


@pytest.mark.parametrize("module,expression,reason", [
    ("", "[triton.Config({'B': b}) for b in sizes()]", "calls `sizes`"),
    ("import os\n", "[triton.Config({'B': int(os.environ['B'])})]", "calls `int`"),
    ("def keep(c):\n    return True\nconfigs = [triton.Config({'B': 16})]\n",
     "[c for c in configs if keep(c)]", "passes arguments to `keep`"),
    ("class Opts:\n    sizes = [16]\n", "[triton.Config({'B': b}) for b in Opts.sizes]", "attribute access"),
    ("", "[triton.Config({'B': b}) for b in [16] if b.bit_length()]", "calls `b.bit_length`"),
    ("configs = [triton.Config({'B': 16})]\n", "[c for c in configs if c.pre_hook is None]", "attribute access"),
    ("from tuned import configs\n", "configs", "`configs` is imported"),
    ("configs = [triton.Config({'B': 16})]\nconfigs = configs + [triton.Config({'B': 32})]\n", "configs",
     "bound more than once"),
    ("configs = [triton.Config({'B': 16})]\nconfigs.append(triton.Config({'B': 32}))\n", "configs", "may change it"),
    ("configs = [triton.Config({'B': 16})]\nshuffle(configs)\n", "configs", "passed to `shuffle"),
    ("configs = [triton.Config({'B': 16})]\nconfigs += [triton.Config({'B': 32})]\n", "configs", "changed by"),
    ("if FAST:\n    configs = [triton.Config({'B': 16})]\n", "configs", "not bound at module level"),
    ("def get(n):\n    return [triton.Config({'B': n})]\n", "get(16)", "passes arguments"),
    ("def get():\n    out = []\n    out.append(triton.Config({'B': 16}))\n    return out\n", "get()", "does more than"),
    ("def get():\n    return get()\n", "get()", "calls itself"),
    ("", "(triton.Config({'B': b}) for b in [16])", "generator expression"),
    ("", "[triton.Config({'B': 16}, maxnreg=lambda: 1)]", "Lambda"),
    ("", "[triton.Config({'B': 16}, pre_hook=make_hook())]", "plain function name"),
    ("", "[triton.Config({'B': 16}, launch_cooperative_grid=True)]", "not understood"),
    ("", "[triton.Config({'B': b}) for b in range(10**9)]", "too long"),
    ("", "[triton.Config({'B': 2**1000})]", "too large"),
    ("", "[16, 32]", "not only triton.Config"),
    ("", "[]", "no configs"),
    ("Config = object\n", "[Config({'B': 16})]", "calls `Config`"),
    ("range = lambda *a: [0]\n", "[triton.Config({'B': b}) for b in range(3)]", "calls `range`"),
])
def test_refusals_say_what_is_not_evaluated(module, expression, reason):
    assert reason in refusal(module, expression)


def test_a_refused_name_inside_a_helper_is_refused_too():
    module = "configs = [triton.Config({'B': 16})]\nconfigs.sort(key=len)\n\ndef get():\n    return configs\n"
    assert "may change it" in refusal(module, "get()")


# ---- what the analysis model exposes ------------------------------------------------------------------
KERNELS = HEADER + '''
WARPS = [4, 8]
shared = [triton.Config({"BLOCK": b}, num_warps=w) for b in [128, 256] for w in WARPS]


def get_configs():
    return shared + [triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=2)]


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"])
@triton.jit
def literal_kernel(x, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=get_configs(), key=["n"])
@triton.jit
def helper_kernel(x, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=shared, key=["n"])
@triton.jit
def named_kernel(x, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=runtime.get_tuned_config("softmax"), key=["n"])
@triton.jit
def runtime_kernel(x, n, BLOCK: tl.constexpr):
    pass
'''


def test_the_model_exposes_known_configs_and_keeps_literal_for_literal_lists_only():
    tunes = {k.name: k.autotune for k in analyze(KERNELS, "kernels.py").kernels}
    assert tunes["literal_kernel"].configs_are_literal and tunes["literal_kernel"].configs_known
    helper = tunes["helper_kernel"]
    assert not helper.configs_are_literal and helper.configs_known and helper.configs_unknown_reason == ""
    assert [(c.kwargs["BLOCK"], c.num_warps, c.num_stages) for c in helper.configs] == [
        (128, 4, None), (128, 8, None), (256, 4, None), (256, 8, None), (1024, 8, 2)]
    # A config built by a comprehension points at the comprehension's one triton.Config call.
    line = KERNELS.splitlines()[helper.configs[0].span.start.line]
    assert line.startswith("shared = [triton.Config(")
    assert tunes["named_kernel"].configs_known and len(tunes["named_kernel"].configs) == 4
    runtime = tunes["runtime_kernel"]
    assert not runtime.configs_known and not runtime.configs and "calls `runtime.get_tuned_config`" in \
        runtime.configs_unknown_reason
