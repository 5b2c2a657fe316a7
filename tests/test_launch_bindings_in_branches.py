"""The launch model reads a host name only where its value is certain at the launch: a reassignment in a branch
the launch is not inside makes it unknown (Liger's ``sm_count = 1`` then ``if cuda: sm_count = <SM count>``)."""

from __future__ import annotations

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.checks import run_checks
from mtmc_lsp.optimizer.hardware import get_profile

KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def partial_sums(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + pid, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


def run(x):
'''


def launch_of(body: str):
    (site,) = analyze(KERNEL + body).launches
    return site


def block_of(body: str):
    """The BLOCK the launch passes, as the launch model reads it (None: unknown)."""
    analysis = analyze(KERNEL + body)
    (site,) = analysis.launches
    return site.constexpr_values(analysis.kernel("partial_sums")).get("BLOCK")


def test_a_value_reassigned_in_a_branch_is_unknown_after_it():
    site = launch_of('''    programs = 1
    if x.device.type == "cuda":
        programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    out = torch.empty(programs, device=x.device)
    partial_sums[(programs,)](x, out, x.numel(), BLOCK=1024)
    return out
''')
    assert site.grid_value is None
    findings = run_checks(analyze(KERNEL + '''    programs = 1
    if x.device.type == "cuda":
        programs = 132
    out = torch.empty(programs, device=x.device)
    partial_sums[(programs,)](x, out, x.numel(), BLOCK=1024)
    return out
'''), get_profile("h100"))
    assert not [f for f in findings if f.code == "MTMC106"]  # "grid 1 runs partial_sums as one program" was wrong


def test_bindings_on_the_launchs_own_path_are_still_read():
    assert block_of('''    if x.numel() > 4096:
        BLOCK = 2048
        partial_sums[(triton.cdiv(x.numel(), BLOCK),)](x, x, x.numel(), BLOCK=BLOCK)
    else:
        BLOCK = 256
''') == 2048
    with_block = launch_of('''    with torch.cuda.device(x.device):
        BLOCK = 512
    partial_sums[(4,)](x, x, x.numel(), BLOCK=BLOCK)
''')
    assert with_block.grid_value == (4,)
    assert block_of('''    with torch.cuda.device(x.device):
        BLOCK = 512
    partial_sums[(4,)](x, x, x.numel(), BLOCK=BLOCK)
''') == 512


def test_augmented_assignments_and_loop_targets_are_unknown():
    assert block_of('''    BLOCK = 256
    BLOCK *= 2
    partial_sums[(4,)](x, x, x.numel(), BLOCK=BLOCK)
''') is None
    assert block_of('''    BLOCK = 256
    for BLOCK in (512, 1024):
        pass
    partial_sums[(4,)](x, x, x.numel(), BLOCK=BLOCK)
''') is None
