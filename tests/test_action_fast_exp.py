"""fast_exp: exponents beside tl.dot move to base 2, and nowhere else; the results stay equal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

from corpus.kernels import kernel_path

H200 = get_profile("h200")
ATTENTION = kernel_path("attention").read_text()  # the corpus flash kernel, written with tl.exp


def offered(text: str, kernel: str):
    return [c for c in applicable(analyze(text), kernel, H200) if c.action == "fast_exp"]


def test_offered_on_an_attention_loop_and_applied_once():
    cands = offered(ATTENTION, "attention_kernel")
    assert len(cands) == 1 and cands[0].params == {}
    new = apply_candidate(ATTENTION, cands[0], H200).new_text
    assert "tl.exp(" not in new.split("def attention_kernel", 1)[1].split("\ndef ", 1)[0]
    assert "tl.math.exp2(" in new and "* 1.4426950408889634" in new
    assert not offered(new, "attention_kernel")  # nothing left to rewrite


@pytest.mark.parametrize("name", ["softmax", "layernorm", "elementwise"])
def test_not_offered_where_no_dot_shares_the_loop(name):
    analysis = analyze(kernel_path(name).read_text())
    for kernel in analysis.kernels:
        assert not [c for c in applicable(analysis, kernel, H200) if c.action == "fast_exp"], kernel.name


def test_exponents_outside_the_dot_loop_stay():
    text = ATTENTION.replace("    tl.store(", "    l_i = tl.exp(tl.log(l_i))\n    tl.store(", 1)
    assert text != ATTENTION
    new = apply_candidate(text, offered(text, "attention_kernel")[0], H200).new_text
    assert "l_i = tl.exp(tl.log(l_i))" in new  # after the loop: not beside a tl.dot


RUNNER = r'''
import importlib.util, sys, torch
outs = []
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("m%d" % len(outs), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    args = module.get_inputs("cpu")
    outs.append(getattr(module, module.ENTRY)(*args).float())
err = ((outs[0] - outs[1]).norm() / outs[0].norm()).item()
print(err)
# The probabilities go to fp16 before the second tl.dot: exp and exp2 may round one of them to the next fp16
# value (numpy 2.4's exp2 does on this input: 2.6e-5), which moves an output by about one fp16 ulp.
assert err < 2e-4, err
'''


@pytest.mark.slow
def test_same_results_under_the_interpreter(tmp_path):
    new = apply_candidate(ATTENTION, offered(ATTENTION, "attention_kernel")[0], H200).new_text
    (tmp_path / "before.py").write_text(ATTENTION)
    (tmp_path / "after.py").write_text(new)
    (tmp_path / "run.py").write_text(RUNNER)
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "before.py"), str(tmp_path / "after.py")],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
