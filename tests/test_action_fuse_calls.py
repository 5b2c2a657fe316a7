"""fuse_calls: composed one-launch wrappers (``relu(add(x, y))``) become one fused launch, or nothing is offered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions.fuse_calls import ACTION as FUSE_CALLS
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_examples import docstring_example  # noqa: E402
from test_actions_semantics import TOL_FP16, TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
ROOT = Path(__file__).resolve().parents[1]

# The module docstring's example without its composer, at eight programs over the harness's 1000 elements.
EXAMPLE = docstring_example("fuse_calls")[0].replace("1024", "128")
KERNELS = EXAMPLE[:EXAMPLE.index("def add_relu(x, y):")]
HARNESS = '''

ENTRY = "add_relu"


def get_inputs(device="cpu"):
    return [torch.randn(1000, device=device), torch.randn(1000, device=device)]


def reference(x, y):
    return torch.relu(x + y)
'''
NESTED = KERNELS + "def add_relu(x, y):\n    return relu(add(x, y))\n" + HARNESS
NAMED = KERNELS + "def add_relu(x, y):\n    t = add(x, y)\n    return relu(t)\n" + HARNESS
# The composer's own ``n`` and ``out`` clash with the wrappers' locals, which are renamed; its result is assigned.
CLASHING = KERNELS + (
    "def add_relu(x, y):\n    n = 2\n    out = relu(add(x, y))\n    out = out * n\n    return out / n\n") + HARNESS

# Composed in a module's forward (KernelBench's ModelNew, an autograd Function).
METHOD = KERNELS + "class AddRelu(torch.nn.Module):\n    def forward(self, x, y):\n        return relu(add(x, y))\n" + HARNESS

# Allocated from the input's shape, device and dtype instead of empty_like: those facts carry over, the layout does not.
EMPTY = NAMED.replace("out = torch.empty_like(x)", "out = torch.empty(x.shape, device=x.device, dtype=x.dtype)")

# Checks in the wrappers, as the tutorials write them: the consumer's moves after the fused launch.
CHECKED = NESTED.replace("    n = x.numel()\n    add_kernel", "    assert x.shape == y.shape\n    n = x.numel()\n    add_kernel").replace(
    "    n = x.numel()\n    relu_kernel", "    assert x.dtype == torch.float32 and out.device == x.device\n    n = x.numel()\n    relu_kernel")


def offered(text: str, kernel: str = "add_kernel") -> list:
    return [c for c in applicable(analyze(text), kernel, H100) if c.action == "fuse_calls"]


def fused(text: str) -> str:
    return fused_by(text, "add_kernel")


def fused_by(text: str, kernel: str) -> str:
    (candidate,) = offered(text, kernel)
    return apply_candidate(text, candidate, H100).new_text


@pytest.mark.parametrize("text", [NESTED, NAMED, CLASHING, EMPTY, CHECKED, METHOD],
                         ids=["nested", "named", "clashing", "empty", "checked", "method"])
def test_offered_on_either_kernel_and_applies_to_one_launch(text):
    (candidate,) = offered(text)
    assert candidate.kernel == "add_kernel" and candidate.params == {"consumer": "relu_kernel"}
    assert offered(text, "relu_kernel") == [candidate]  # the consumer's list shows the same step
    assert not [c for c in applicable(analyze(text), "add_kernel", H100) if c.action == "fusion"]  # fusion alone cannot
    new = apply_candidate(text, candidate, H100).new_text
    analysis = analyze(new)
    assert [k.name for k in analysis.kernels] == ["add_kernel"]
    assert [s.kernel for s in analysis.launches] == ["add_kernel"]
    assert "def add(" not in new and "def relu(" not in new and "tmp" not in new
    assert "tl.maximum(" in new.split("def add_relu")[0]


def test_renamed_locals_get_their_names_back_when_free():
    new = fused(NESTED)
    assert "def add_relu(x, y):\n    n = x.numel()\n    out = torch.empty_like(x)\n" in new
    clash = fused(CLASHING)
    # The composer's n and out keep their meaning; the wrappers' locals that clash keep fresh names.
    assert "    n = 2\n    n_1 = x.numel()\n" in clash and "    out = out_2\n    out = out * n\n" in clash


OTHER_CALLER = {
    "a second caller of the consumer wrapper": "\n\ndef just_relu(x):\n    return relu(x)\n",
    "a second caller of the producer wrapper": "\n\ndef just_add(x, y):\n    return add(x, y)\n",
    "the producer kernel in __all__": '\n__all__ = ["add_kernel"]\n',
    "the producer kernel in a registry": "\nKERNELS = {'add': add_kernel}\n",
    "a wrapper passed as a value": "\nOPS = [relu]\n",
    "a wrapper in __all__": '\n__all__ = ["add_relu", "add"]\n',
    "the consumer kernel launched elsewhere": "\n\ndef relu_again(x, out):\n    relu_kernel[(1,)](x, out, x.numel(), BLOCK=128)\n",
}


@pytest.mark.parametrize("other", sorted(OTHER_CALLER))
def test_not_offered_when_the_file_uses_a_wrapper_or_the_producer_elsewhere(other):
    """Both wrappers are removed and the producer kernel changes in place, so any other use refuses."""
    assert not offered(NESTED + OTHER_CALLER[other])


def test_a_docstring_or_torch_attribute_naming_a_wrapper_is_not_a_use():
    text = NESTED.replace("def add_relu(x, y):\n", 'def add_relu(x, y):\n    """relu of add, via torch.relu semantics."""\n')
    assert offered(text)


REFUSED = {
    "a branch in the producer": ("    n = x.numel()\n    add_kernel", "    n = x.numel()\n    if n == 0:\n        return out\n    add_kernel"),
    "a loop in the consumer": ("    relu_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)\n",
                               "    for _ in range(1):\n        relu_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)\n"),
    "two launches in a wrapper": ("    relu_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)\n",
                                  ("    relu_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)\n"
                                   "    relu_kernel[(triton.cdiv(n, 128),)](out, out, n, BLOCK=128)\n")),
    "a result not allocated by the wrapper": ("    out = torch.empty_like(x)\n    n = x.numel()\n    relu_kernel",
                                              "    out = x\n    n = x.numel()\n    relu_kernel"),
    "a consumer result of another dtype": ("    out = torch.empty_like(x)\n    n = x.numel()\n    relu_kernel",
                                           "    out = torch.empty_like(x, dtype=torch.float64)\n    n = x.numel()\n    relu_kernel"),
    "a check that reads the intermediate's values": ("    n = x.numel()\n    relu_kernel", "    assert x.sum() > -1e9\n    n = x.numel()\n    relu_kernel"),
    "a check that calls something": ("    n = x.numel()\n    relu_kernel", "    assert print() is None\n    n = x.numel()\n    relu_kernel"),
    "a check of the intermediate's layout": ("    n = x.numel()\n    relu_kernel", "    assert x.is_contiguous()\n    n = x.numel()\n    relu_kernel"),
    "a strided result query": ("    n = x.numel()\n    relu_kernel", "    n = x.numel() + 0 * x.stride(0)\n    relu_kernel"),
    "the composer rebinds a global the wrappers read": ("def add_relu(x, y):\n", "def add_relu(x, y):\n    torch = __import__('torch')\n"),
    "a computed argument": ("return relu(add(x, y))", "return relu(add(x, y * 2))"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_not_offered_when_a_precondition_cannot_be_proven(case):
    old, new = REFUSED[case]
    text = NESTED.replace(old, new, 1)
    assert text != NESTED
    assert analyze(text).syntax_error is None
    assert not offered(text) and not offered(text, "relu_kernel")


def test_the_consumers_check_runs_after_the_fused_launch():
    new = fused(CHECKED)
    assert "    assert x.shape == y.shape\n    n = x.numel()\n" in new  # the producer's stays where it was
    assert "BLOCK=128)\n    assert x.dtype == torch.float32 and x.device == x.device\n    return out\n" in new


def test_the_intermediate_used_twice_is_not_fused():
    text = NAMED.replace("    return relu(t)\n", "    return relu(t) + t\n")
    assert not offered(text)


def test_a_stale_candidate_is_refused():
    (candidate,) = offered(NESTED)
    with pytest.raises(ActionError):
        apply_candidate(NESTED + "\n\ndef again(x, y):\n    return add(x, y)\n", candidate, H100)


def test_the_edit_is_small():
    (candidate,) = offered(NESTED)
    edit = apply_candidate(NESTED, candidate, H100)
    assert 0 < edit.changed_lines <= 40
    assert any("removed both wrappers" in note for note in edit.notes)


# The example's kernels and wrappers apart, and a third one-launch wrapper: mul(a, b).
KERNEL_DEFS = KERNELS[:KERNELS.index("def add(x, y):")]
ADD_WRAPPER = KERNELS[KERNELS.index("def add(x, y):"):KERNELS.index("def relu(x):")]
RELU_WRAPPER = KERNELS[KERNELS.index("def relu(x):"):]
MUL = (KERNEL_DEFS.split("@triton.jit")[1].replace("add_kernel", "mul_kernel").replace(") + tl.load(", ") * tl.load("),
       ADD_WRAPPER.replace("def add(", "def mul(").replace("add_kernel", "mul_kernel"))
THREE = KERNEL_DEFS + "@triton.jit" + MUL[0] + ADD_WRAPPER + MUL[1] + RELU_WRAPPER
HARNESS3 = HARNESS.replace("return [torch.randn(1000, device=device), torch.randn(1000, device=device)]",
                           "return [torch.randn(1000, device=device) for _ in range(3)]").replace(
    "def reference(x, y):\n    return torch.relu(x + y)", "def reference(x, y, z):\n    return torch.relu((x + y) * z)")
CHAIN_NESTED = THREE + "def add_relu(x, y, z):\n    return relu(mul(add(x, y), z))\n" + HARNESS3
CHAIN_NAMED = THREE + "def add_relu(x, y, z):\n    t = add(x, y)\n    u = mul(t, z)\n    return relu(u)\n" + HARNESS3
# A composing function of its own: once its pair is fused it is a one-launch wrapper, and composes again.
CHAIN_WRAPPED = THREE.replace("def relu(x):", "def add_mul(x, y, z):\n    return mul(add(x, y), z)\n\n\ndef relu(x):") + (
    "def add_relu(x, y, z):\n    return relu(add_mul(x, y, z))\n" + HARNESS3)


def fuse_all(text: str, pick=lambda found: found[0]) -> tuple[str, list[str]]:
    """``text`` after fuse_calls steps until none is offered (``pick`` chooses among the offers), and the steps taken."""
    steps = []
    while True:
        analysis = analyze(text)
        found = []
        for kernel in analysis.kernels:
            found += [c for c in applicable(analysis, kernel, H100) if c.action == "fuse_calls" and c not in found]
        if not found:
            return text, steps
        candidate = pick(found)
        steps.append(f"{candidate.kernel}->{candidate.params['consumer']}")
        text = apply_candidate(text, candidate, H100).new_text


@pytest.mark.parametrize("text", [CHAIN_NESTED, CHAIN_NAMED, CHAIN_WRAPPED], ids=["nested", "named", "wrapped"])
@pytest.mark.parametrize("pick", [0, -1], ids=["first-offer", "last-offer"])
def test_a_chain_of_three_wrappers_fuses_into_one_launch_step_by_step(text, pick):
    """Each step leaves the fused launch in the composer, which fuses again with the wrapper call next to it."""
    new, steps = fuse_all(text, lambda found: found[pick])
    assert len(steps) == 2, steps
    analysis = analyze(new)
    assert len(analysis.kernels) == 1 and len(analysis.launches) == 1
    assert not any(f"def {name}(" in new for name in ("add", "mul", "relu", "add_mul"))
    body = new.split("def add_relu")[0]
    assert " * " in body and "tl.maximum(" in body and "+ tl.load(" in body


def test_a_nested_chain_offers_the_innermost_pair_first():
    assert [c.params["consumer"] for c in offered(CHAIN_NESTED)] == ["mul_kernel"]  # mul's argument is a call until then
    assert {(c.kernel, c.params["consumer"]) for c in offered(CHAIN_NAMED, "mul_kernel")} == {
        ("add_kernel", "mul_kernel"), ("mul_kernel", "relu_kernel")}


def test_an_assigned_result_keeps_its_name():
    """``u = mul(t, z)``: the fused launch writes ``u`` itself, no ``u = out`` alias is left for the next step."""
    new = fused(CHAIN_NAMED)
    assert "    u = torch.empty_like(x)\n" in new and "add_kernel[(triton.cdiv(n, 128),)](x, y, u, n, z, BLOCK=128)\n" in new
    assert "= out\n" not in new


# One side launched in the composer itself, the other a one-launch wrapper.
LAUNCHED_THEN_WRAPPED = {
    "named grid": KERNEL_DEFS + RELU_WRAPPER + """def add_relu(x, y):
    t = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 128),)
    add_kernel[grid](x, y, t, n, BLOCK=128)
    return relu(t)
""" + HARNESS,
    "a method, torch.empty and a keyword": KERNEL_DEFS + RELU_WRAPPER + """class AddRelu(torch.nn.Module):
    def forward(self, x, y):
        t = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 128),)](x, y, t, n, BLOCK=128)
        return relu(x=t)


def add_relu(x, y):
    return AddRelu()(x, y)
""" + HARNESS,
    "inside an outer call": KERNEL_DEFS + RELU_WRAPPER + """def add_relu(x, y):
    t = torch.empty_like(x)
    n = t.numel()
    add_kernel[(triton.cdiv(n, 128),)](x, y, t, n, BLOCK=128)
    return torch.relu(relu(t)) * 1
""" + HARNESS,
}
WRAPPED_THEN_LAUNCHED = {
    "queries of the result": KERNEL_DEFS + ADD_WRAPPER + """def add_relu(x, y):
    t = add(x, y)
    out = torch.empty_like(t)
    n = t.numel()
    relu_kernel[(triton.cdiv(n, 128),)](t, out, n, BLOCK=128)
    return out
""" + HARNESS,
    "named grid": KERNEL_DEFS + ADD_WRAPPER + """def add_relu(x, y):
    out = torch.empty_like(x)
    t = add(x, y)
    n = out.numel()
    grid = (triton.cdiv(n, 128),)
    relu_kernel[grid](t, out, n, BLOCK=128)
    return out
""" + HARNESS,
}
MIXED = {**{f"launch, wrapper: {k}": v for k, v in LAUNCHED_THEN_WRAPPED.items()},
         **{f"wrapper, launch: {k}": v for k, v in WRAPPED_THEN_LAUNCHED.items()}}


@pytest.mark.parametrize("case", sorted(MIXED))
def test_a_launch_in_the_composer_and_a_wrapper_call_fuse(case):
    text = MIXED[case]
    (candidate,) = offered(text)
    assert candidate.params == {"consumer": "relu_kernel"} and offered(text, "relu_kernel") == [candidate]
    edit = apply_candidate(text, candidate, H100)
    analysis = analyze(edit.new_text)
    assert [k.name for k in analysis.kernels] == ["add_kernel"] and [s.kernel for s in analysis.launches] == ["add_kernel"]
    assert "def add(" not in edit.new_text and "def relu(" not in edit.new_text and "    t = " not in edit.new_text
    assert any("removed the wrapper" in note for note in edit.notes)
    assert FUSE_CALLS.why_not(analyze(text), analyze(text).kernel("add_kernel"), H100) is None


# The consumer wrapper reads a second tensor: it becomes a new pointer parameter of the launched producer.
LAUNCH_THEN_MUL = KERNEL_DEFS + "@triton.jit" + MUL[0] + MUL[1] + """def add_relu(x, y, z):
    t = torch.empty_like(x)
    n = t.numel()
    add_kernel[(triton.cdiv(n, 128),)](x, y, t, n, BLOCK=128)
    return mul(t, z)
""" + HARNESS3.replace("torch.relu((x + y) * z)", "(x + y) * z")


def test_a_launch_and_a_wrapper_with_a_second_input_fuse():
    assert "(x + y) * z" in LAUNCH_THEN_MUL
    new = fused_by(LAUNCH_THEN_MUL, "add_kernel")
    assert "    add_kernel[(triton.cdiv(n, 128),)](x, y, out, n, z, BLOCK=128)\n    return out\n" in new
    assert "mul_kernel" not in new and [s.kernel for s in analyze(new).launches] == ["add_kernel"]


SHARED_INTERMEDIATE = {
    "returned too": (LAUNCHED_THEN_WRAPPED["named grid"], "    return relu(t)\n", "    return relu(t), t\n",
                     "used for more than passing it"),
    "read again": (LAUNCHED_THEN_WRAPPED["named grid"], "    return relu(t)\n", "    u = relu(t)\n    return u + t\n",
                   "used for more than passing it"),
    "rebound before the call": (LAUNCHED_THEN_WRAPPED["named grid"], "    return relu(t)\n", "    t = t * 2\n    return relu(t)\n",
                                "changes what add_kernel reads"),
    "the wrapper's result returned too": (WRAPPED_THEN_LAUNCHED["queries of the result"], "    return out\n",
                                          "    return out, t\n", "used for more than passing it"),
    "written in place before the call": (LAUNCHED_THEN_WRAPPED["named grid"], "    return relu(t)\n",
                                         "    return torch.add(t.add_(1.0), relu(t))\n", "no one-launch wrapper call"),
}


@pytest.mark.parametrize("case", sorted(SHARED_INTERMEDIATE))
def test_an_intermediate_that_is_not_private_is_refused_with_a_reason(case):
    base, old, new, reason = SHARED_INTERMEDIATE[case]
    text = base[::-1].replace(old[::-1], new[::-1], 1)[::-1]  # the composer's line, not a wrapper's
    assert text != base
    assert not offered(text) and not offered(text, "relu_kernel")
    analysis = analyze(text)
    assert reason in FUSE_CALLS.why_not(analysis, analysis.kernel("add_kernel"), H100)


def _matmul_wrappers() -> str:
    """The dev corpus's linear + GELU chain rewritten as two wrappers composed, at interpreter sizes."""
    text = (ROOT / "benchmarks" / "wild" / "dev" / "mm_linear_gelu_two_kernels.py").read_text()
    composed = text[text.index("def linear_gelu(x, w, b):"):text.index("def get_inputs")]
    wrappers = """def linear(x, w, b):
    M, K = x.shape
    _, N = w.shape
    h = torch.empty((M, N), device=x.device, dtype=torch.float16)
    linear_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, w, b, h, M, N, K, x.stride(0), w.stride(0), h.stride(0),
                                                            BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return h


def gelu(h):
    out = torch.empty_like(h)
    n = h.numel()
    gelu_kernel[(triton.cdiv(n, 1024),)](h, out, n, BLOCK_SIZE=1024)
    return out


ENTRY = "linear_gelu"


def linear_gelu(x, w, b):
    return gelu(linear(x, w, b))


"""
    return text.replace(composed, wrappers).replace("M: int = 4096, N: int = 4096, K: int = 1024",
                                                    "M: int = 40, N: int = 48, K: int = 72")


def test_a_matmul_wrapper_and_its_elementwise_consumer_fuse_into_the_epilogue():
    """``gelu(linear(x, w, b))``: the consumer's math moves into the matmul's store (matmul_epilogue), in one step."""
    text = _matmul_wrappers()
    (cand,) = offered(text, "linear_kernel")
    assert cand.params == {"consumer": "gelu_kernel"}
    new = apply_candidate(text, cand, H100).new_text
    analysis = analyze(new)
    assert [k.name for k in analysis.kernels] == ["linear_kernel"] and "tl.sigmoid" in new.split("def linear_gelu")[0]
    assert "def linear(" not in new and "def gelu(" not in new


def _residual_gate_gelu() -> str:
    """The dev corpus's wrappers around a launch in the host function, at interpreter size, with the runner's ENTRY."""
    text = (ROOT / "benchmarks" / "wild" / "dev" / "wrapper_ew_residual_gate_gelu.py").read_text()
    return text.replace("n: int = 4096 * 1000 + 17", "n: int = 1000 + 17") + '\n\nENTRY = "residual_gate_gelu"\n'


@pytest.mark.parametrize("pick", [0, -1], ids=["first-offer", "last-offer"])
def test_the_corpus_chain_of_wrappers_and_a_launch_fuses_into_one_launch(pick):
    new, steps = fuse_all(_residual_gate_gelu(), lambda found: found[pick])
    assert len(steps) == 2, steps
    analysis = analyze(new)
    assert [k.name for k in analysis.kernels] == ["add_kernel"] and len(analysis.launches) == 1


@pytest.mark.slow
def test_fused_calls_compute_the_same_under_the_interpreter(tmp_path):
    corpus = kernel_path("wrapper_chain").read_text()
    (cand,) = offered(corpus, "sigmoid_kernel")
    jobs = [job(tmp_path, "nested:reference", NESTED, NESTED, TOL_FP32, reference=True),
            job(tmp_path, "corpus:reference", corpus, corpus, TOL_FP32, reference=True)]
    for name, text in (("nested", NESTED), ("named", NAMED), ("clashing", CLASHING), ("empty", EMPTY), ("checked", CHECKED)):
        jobs.append(job(tmp_path, f"{name}:fuse_calls", text, fused(text), TOL_FP32))
    jobs.append(job(tmp_path, "corpus:fuse_calls", corpus, apply_candidate(corpus, cand, H100).new_text, TOL_FP32))
    jobs.append(job(tmp_path, "chain:reference", CHAIN_NAMED, CHAIN_NAMED, TOL_FP32, reference=True))
    jobs.append(job(tmp_path, "chain-nested:one step", CHAIN_NESTED, fused(CHAIN_NESTED), TOL_FP32))
    for name, text in (("chain-nested", CHAIN_NESTED), ("chain-named", CHAIN_NAMED), ("chain-wrapped", CHAIN_WRAPPED)):
        for pick in (0, -1):
            jobs.append(job(tmp_path, f"{name}:all steps {pick}", text, fuse_all(text, lambda found, pick=pick: found[pick])[0], TOL_FP32))
    for name, text in MIXED.items():
        jobs.append(job(tmp_path, f"{name}:fuse_calls", text, fused(text), TOL_FP32))
    jobs.append(job(tmp_path, "launch-then-mul:fuse_calls", LAUNCH_THEN_MUL, fused(LAUNCH_THEN_MUL), TOL_FP32))
    wild = _residual_gate_gelu()
    jobs.append(job(tmp_path, "wild-gate:reference", wild, wild, TOL_FP32, reference=True))
    for pick in (0, -1):
        jobs.append(job(tmp_path, f"wild-gate:all steps {pick}", wild, fuse_all(wild, lambda found, pick=pick: found[pick])[0], TOL_FP32))
    matmul = _matmul_wrappers()
    jobs.append(job(tmp_path, "matmul:reference", matmul, matmul, TOL_FP16, reference=True))
    jobs.append(job(tmp_path, "matmul:fuse_calls", matmul, fused_by(matmul, "linear_kernel"), TOL_FP16))
    results = run_jobs(jobs, tmp_path)
    assert len(results) == len(jobs) and all(r["ok"] for r in results), results
