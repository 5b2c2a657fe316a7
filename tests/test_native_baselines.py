"""Every corpus file whose reference computes wider than its inputs has an ``eager()`` in the inputs' precision.

The speed-ups reported against "eager" and torch.compile are against that call (issue 35): an fp16 matmul
against ``torch.matmul`` on fp16, not against the fp32 matmul the reference checks correctness with.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest
import torch

from mtmc_lsp.optimizer.verify.harness import Harness, discover_harness, widest_cast
from mtmc_lsp.optimizer.verify.runtime import compare as cmp
from mtmc_lsp.optimizer.verify.runtime.job import Impl, Job

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted([*(ROOT / "benchmarks" / "wild").glob("*/*.py"), *(ROOT / "benchmarks" / "suite").glob("*.py")])
CORPUS = [p for p in CORPUS if not p.name.startswith("_")]
# Integer knobs of get_inputs are halved to at most this (the CI corpus test's cap): small CPU shapes.
CAP = 32


def _knobs(gen) -> dict:
    out = {}
    for name, param in inspect.signature(gen).parameters.items():
        if name == "device":
            out[name] = "cpu"
        elif isinstance(param.default, int) and not isinstance(param.default, bool) and name != "seed":
            value = param.default
            while value > CAP:
                value //= 2
            out[name] = value
    return out


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"native_baseline_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call(module, harness: Harness, name: str, inputs: list):
    """``name`` (a function, or a KernelBench class built from get_init_inputs under seed 0) on clones of ``inputs``."""
    target = getattr(module, name)
    args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    if isinstance(target, type):
        init = getattr(module, harness.init_inputs)() if harness.init_inputs else []
        torch.manual_seed(0)
        target = target(*init)
    with torch.no_grad():
        return target(*args)


def _own_precision(inputs: list) -> torch.dtype | None:
    floats = [t for _, t in cmp.flatten(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return max(floats, key=lambda t: t.numel()).dtype if floats else None


def _corpus_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.mark.parametrize("path", CORPUS, ids=_corpus_id)
def test_upcasting_reference_has_native_eager(path: Path):
    text = path.read_text()
    harness = discover_harness(text, str(path))
    if not isinstance(harness, Harness) or harness.style == "test" or not harness.reference:
        pytest.skip("no separate reference: no eager figure is reported for this file")
    if harness.reference_casts_to is None:
        pytest.skip("the reference converts to no wider float")
    module = _load(path)
    torch.manual_seed(0)
    made = module.get_inputs(**_knobs(module.get_inputs))
    inputs = list(made) if isinstance(made, (list, tuple)) else [made]
    upcast = cmp.upcast(harness.reference_casts_to, inputs)
    if upcast is None:
        pytest.skip("the reference keeps the inputs' precision: it is the baseline")
    assert harness.eager == "eager", f"the reference computes {upcast}: add eager(*inputs) in the inputs' precision"
    assert cmp.upcast(widest_cast(text, "eager"), inputs) is None, "eager() itself converts to a wider float"
    own = _own_precision(inputs)
    expected = cmp.flatten(_call(module, harness, harness.reference, inputs))
    got = cmp.flatten(_call(module, harness, "eager", inputs))
    assert len(got) == len(expected), f"eager() returns {len(got)} outputs, the reference {len(expected)}"
    for (name, value), (_, want) in zip(got, expected):
        assert value.shape == want.shape, name
        if value.is_floating_point():
            assert torch.finfo(value.dtype).bits <= torch.finfo(own).bits, f"{name} is {value.dtype}, wider than {own}"
            result = cmp.compare(value.to(want.dtype), want, floor=own)
            assert result["ok"], f"{name}: {result.get('mismatch')}"
        else:  # quantised outputs: a lower-precision scale may round a value one step the other way
            assert int((value.long() - want.long()).abs().max()) <= 1, name


def test_upcast_rule():
    half, single = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(4, dtype=torch.float32)
    assert cmp.upcast("float32", [half, single]) == "float16 -> float32"  # the largest input sets the precision
    assert cmp.upcast("float32", [torch.zeros(8), 3]) is None
    assert cmp.upcast("float64", [torch.zeros(8)]) == "float32 -> float64"
    assert cmp.upcast(None, [half]) is None
    assert cmp.upcast("float32", [torch.zeros(8, dtype=torch.int8)]) is None  # no float input: nothing to keep


FUNCTION_FILE = '''
import torch
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n):
    pass

def run(a, b):
    k[(1,)](a, 1)
    return a

def get_inputs(device="cuda"):
    return [torch.randn(4, 4, device=device, dtype=torch.float16)] * 2

def _wide(t):
    return t.to(torch.float64)

def reference(a, b):
    return _wide(a) @ b.float()
'''


def test_discovery_finds_eager_and_the_references_casts():
    bare = discover_harness(FUNCTION_FILE, "mm.py")
    assert bare.entry == "run" and bare.eager is None and bare.reference_casts_to == "float64"  # through _wide()
    with_eager = discover_harness(FUNCTION_FILE + "\ndef eager(a, b):\n    return a @ b\n", "mm.py")
    assert with_eager.entry == "run" and with_eager.eager == "eager"
    model = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.float()\n"
             "class ModelNew(Model):\n    pass\ndef get_inputs():\n    return [torch.randn(2)]\n"
             "def eager(x):\n    return x\n")
    kb = discover_harness(model, "kb.py")
    assert kb.style == "kernelbench" and kb.eager == "eager" and kb.reference_casts_to == "float32"


def _job_with(harness: dict, eager=None) -> Job:
    """A worker Job with only what the timing's baseline choice reads (no process, no device)."""
    job = Job.__new__(Job)
    job.harness, job.grad, job.eager = harness, True, eager
    job.result = {"runtime": {}}
    return job


def test_worker_times_eager_in_the_references_place():
    args = [torch.ones(8, 8, dtype=torch.float16)]
    reference = lambda a: a.float()  # noqa: E731
    job = _job_with({"reference_casts_to": "float32"}, Impl("eager", lambda a: a[0] * 2, None))
    timed = {"reference": lambda a: reference(*a), "new": lambda a: a[0]}
    job._time_eager_as_reference(timed, args)
    assert job.result["runtime"] == {"reference_timed": "eager"}
    assert timed["reference"](args).dtype == torch.float16  # the eager call now stands for the reference

    job = _job_with({"reference_casts_to": "float32"})
    timed = {"reference": lambda a: reference(*a)}
    job._time_eager_as_reference(timed, args)
    assert job.result["runtime"] == {"reference_upcast": "float16 -> float32"}  # timed, but marked

    def broken(a):
        raise RuntimeError("no kernel for this shape")

    job = _job_with({"reference_casts_to": "float32"}, Impl("eager", broken, None))
    timed = {"reference": lambda a: reference(*a)}
    job._time_eager_as_reference(timed, args)
    assert timed["reference"](args).dtype == torch.float32  # the reference stays timed
    assert job.result["runtime"]["reference_upcast"] == "float16 -> float32"
    assert "no kernel" in job.result["runtime"]["eager_error"]


def test_speed_messages_name_the_baseline_timed():
    from mtmc_lsp.optimizer.verify.report import Speed

    speed = Speed("reference", 2.0, 1.0, 2.0, 0.01, 3, [2.0] * 3, True)
    assert speed.reference_label == "the reference"
    speed.reference_timed = "eager"
    assert speed.describe(speed.reference_label).startswith("2.00x faster than eager()")
    speed.reference_timed, speed.reference_upcast = "reference", "float16 -> float32"
    assert speed.reference_label == "the reference (computing float16 -> float32)"
