"""Tolerances by precision: the lowest precision among inputs, reference and output sets the bar."""

from __future__ import annotations

import torch

from mtmc_lsp.optimizer.verify.runtime import compare as cmp


def test_tolerance_follows_the_lowest_precision_but_integers_stay_exact():
    assert cmp.tolerance_for(torch.float32) == 1e-4
    assert cmp.tolerance_for(torch.float32, torch.bfloat16) == 1e-2
    assert cmp.tolerance_for(torch.float16, torch.float32) == 1e-2  # never tighter than the output's own
    assert cmp.tolerance_for(torch.int64, torch.bfloat16) == 0.0
    assert cmp.lowest_precision([torch.float32, torch.int64, torch.bfloat16]) == torch.bfloat16
    assert cmp.lowest_precision([torch.int32]) is None


def test_a_reference_computed_in_bf16_and_returned_as_fp32_is_recognised():
    torch.manual_seed(0)
    a, b = torch.randn(4096), torch.randn(4096)
    assert cmp.effective_precision((a.bfloat16() * b.bfloat16()).float()) == torch.bfloat16
    assert cmp.effective_precision((a.half() * b.half()).float()) == torch.float16
    assert cmp.effective_precision(a * b) is None  # real fp32 math
    assert cmp.effective_precision(torch.arange(1000.0)) is None  # small integers are exact in any format
    assert cmp.effective_precision(torch.randn(10).bfloat16().float()) is None  # too few values to tell


def test_a_correct_fp32_kernel_passes_against_a_bf16_reference_and_a_wrong_one_does_not():
    torch.manual_seed(0)
    x = torch.randn(2048)
    reference = (x.bfloat16() * 3).float()  # the reference computes in bf16
    candidate = x * 3  # the kernel computes in fp32: more exact than the reference
    assert not cmp.compare(candidate, reference)["ok"]  # judged at fp32's 1e-4 it would fail
    floor = cmp.effective_precision(reference)
    assert cmp.compare(candidate, reference, floor=floor)["ok"]
    wrong = candidate.clone()
    wrong[37] += 1.0
    result = cmp.compare(wrong, reference, floor=floor)
    assert not result["ok"] and result["mismatch"]["index"] == [37] and result["mismatch"]["atol"] == 1e-2


def test_integers_rounded_from_floats_may_differ_by_one_step_on_a_few_elements_only():
    expected = torch.randint(-127, 127, (3584,), dtype=torch.int8)
    tie = expected.clone()
    tie[7] += 1  # one tie rounded the other way
    assert cmp.compare(tie, expected, floor=torch.float16)["ok"]
    assert not cmp.compare(tie, expected)["ok"]  # integer inputs: exact
    many = expected.clone()
    many[:100] += 1  # 100 of 3584: a wrong kernel, not ties
    assert not cmp.compare(many, expected, floor=torch.float16)["ok"]
    two_steps = expected.clone()
    two_steps[7] += 2
    assert not cmp.compare(two_steps, expected, floor=torch.float16)["ok"]
