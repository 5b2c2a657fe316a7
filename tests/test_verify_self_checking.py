"""A test-style file whose tests assert their own results verifies alone: the asserts are the check."""

from __future__ import annotations

import pytest

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, discover_harness, verify_file

pytestmark = pytest.mark.slow  # interpreter runs in a worker process

TESTS = '''import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def double(x):
    out = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def test_double():
    x = torch.randn(200)
    CHECK
'''
ASSERTING = TESTS.replace("CHECK", "torch.testing.assert_close(double(x), 2 * x)")


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def _verify(pool, text):
    return verify_file(text, None, "t.py", "h100", VerifyOptions(pool=pool, compile_for_target=False))


def test_asserting_tests_verify_without_a_previous_version(pool):
    assert discover_harness(ASSERTING).self_checking == ["test_double"]
    report = _verify(pool, ASSERTING)
    assert report.status == "verified", report.summary
    assert "the file's own tests" in report.summary and report.reward.correct


def test_a_wrong_kernel_fails_its_own_test(pool):
    report = _verify(pool, ASSERTING.replace("* 2.0, mask=mask)", "* 3.0, mask=mask)"))
    assert report.status == "incorrect", report.summary


def test_asserts_in_a_helper_of_the_file_count():
    text = TESTS.replace("CHECK", "_check(double(x), 2 * x)") + (
        "\n\ndef _check(got, want):\n    assert torch.allclose(got, want)\n")
    assert discover_harness(text).self_checking == ["test_double"]


def test_tests_that_check_nothing_stay_unverified(pool):
    text = TESTS.replace("CHECK", "return double(x)")
    assert discover_harness(text).self_checking == []
    assert _verify(pool, text).status == "no_harness"
