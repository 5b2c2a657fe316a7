"""Two versions of a file that register the same torch custom operator are judged apart.

PyTorch's way to expose a Triton kernel to torch.compile is ``@triton_op("ns::add", ...)``. Registering a
name again replaces the operator, and every earlier wrapper then dispatches to the latest kernel: a new
version computing ``x - y`` was verified correct against ``x + y`` (max error 0) before each version got
operator names of its own (``optimizer/verify/runtime/versions.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file
from mtmc_lsp.optimizer.verify.runtime.versions import _private_op_calls, operator_names

OP_FILE = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "ew_add_triton_op.py").read_text()
SMALL = OP_FILE.replace("n: int = 1 << 24", "n: int = 1000")
BROKEN = SMALL.replace("x + y, mask=mask", "x - y, mask=mask")
# The host calls its operator through ``torch.ops`` instead of the decorated function.
THROUGH_OPS = SMALL.replace("def reference(x, y):", "def add_via_ops(x, y):\n    return torch.ops.mtmc_wild.add(x, y)\n\n\n"
                            "def reference(x, y):")

# The older spellings: ``torch.library.define`` + ``impl`` (PyTorch 2.1-2.3), and a ``Library("ns", "FRAGMENT")`` whose
# ``define``/``impl`` name the operator without its namespace (vLLM's direct_register_custom_op). A second ``define``
# of one name fails the import: before, the verifier called the new version broken.
KERNEL_AND_INPUTS = SMALL.split("@triton_op(")[0].replace("from torch.library import triton_op, wrap_triton\n", "")
IMPL = '''

def _add_impl(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    output = torch.empty_like(x)
    n_elements = output.numel()
    add_kernel[(triton.cdiv(n_elements, 256),)](x, y, output, n_elements, 256)
    return output

'''
TAIL = '''

def add(x, y):
    return torch.ops.mtmc_wild.add(x, y)


def get_inputs(device="cuda", n: int = 1000):
    return [torch.randn(n, device=device), torch.randn(n, device=device)]


def reference(x, y):
    return x + y
'''
DEFINE = KERNEL_AND_INPUTS + IMPL + '''
torch.library.define("mtmc_wild::add", "(Tensor x, Tensor y) -> Tensor")
torch.library.impl("mtmc_wild::add", ("cpu", "cuda"), _add_impl)
''' + TAIL
FRAGMENT = KERNEL_AND_INPUTS + IMPL + '''
_lib = torch.library.Library("mtmc_wild", "FRAGMENT")
_lib.define("add(Tensor x, Tensor y) -> Tensor")
_lib.impl("add", _add_impl, "CPU")
_lib.impl("add", _add_impl, "CUDA")
''' + TAIL


@pytest.fixture()
def pool():
    """A fresh pool per test: which version registered an operator last depends on what its workers loaded before."""
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, new: str, old: str | None, **kwargs):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60, **kwargs)
    return verify_file(new, old, "ew_add_triton_op.py", "h100", options)


def test_calls_through_torch_ops_follow_the_private_name():
    assert "torch.ops.mtmc_wild.add(x, y)" in THROUGH_OPS
    text = _private_op_calls(THROUGH_OPS, frozenset({"mtmc_wild::add"}), "_v1")
    assert "torch.ops.mtmc_wild.add_v1(x, y)" in text and '"mtmc_wild::add"' in text  # the decorator's name at run time
    assert text.count("\n") == THROUGH_OPS.count("\n")
    assert _private_op_calls("torch.ops.mtmc_wild.addition(x)", frozenset({"mtmc_wild::add"}), "_v1") == \
        "torch.ops.mtmc_wild.addition(x)"


@pytest.mark.slow
def test_a_wrong_version_of_a_custom_operator_is_caught(pool):
    assert BROKEN != SMALL
    report = verify(pool, BROKEN, SMALL)  # first: a fresh worker (x - y passed as correct, max error 0)
    assert report.status == "incorrect", report.summary
    assert verify(pool, SMALL, SMALL).status == "verified"
    assert verify(pool, BROKEN, SMALL).status == "incorrect"  # again, in workers that loaded both


@pytest.mark.slow
def test_a_host_calling_torch_ops_is_verified(pool):
    report = verify(pool, THROUGH_OPS, SMALL, entry="add_via_ops")
    assert report.status == "verified", report.summary


def test_operators_a_library_defines_are_found():
    assert operator_names(FRAGMENT) == {"mtmc_wild::add"} and operator_names(DEFINE) == {"mtmc_wild::add"}
    # An aten override (FlagGems' Library("aten", "IMPL")) defines nothing of its own: nothing is renamed.
    assert operator_names('lib = torch.library.Library("aten", "IMPL")\nlib.impl("add.Tensor", add, "CUDA")') == set()


@pytest.mark.slow
@pytest.mark.parametrize("text", [DEFINE, FRAGMENT], ids=["define", "library"])
def test_older_operator_spellings_are_judged_apart(pool, text):
    broken = text.replace("x + y, mask=mask", "x - y, mask=mask")
    assert broken != text
    assert verify(pool, text, text, entry="add").status == "verified"  # the second define used to fail the import
    assert verify(pool, broken, text, entry="add").status == "incorrect"
