"""Static checks: each fires on a planted case at the right span and stays quiet on correct code."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.checks import CHECKS, DOCS_FILE, Finding, run_checks
from mtmc_lsp.optimizer.checks import kernel_facts as check_facts
from mtmc_lsp.optimizer.checks.kernel_facts import clear_facts_cache
from mtmc_lsp.optimizer.hardware import PROFILES, get_profile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "mtmc_lsp" / "examples"
H100 = get_profile("h100")
A100 = get_profile("a100")

HEADER = "import triton\nimport triton.language as tl\n\n"


def findings(text: str, target=H100, code: str | None = None) -> list[Finding]:
    result = run_checks(analyze(text), target)
    return [f for f in result if code is None or f.code == code]


def spanned(text: str, finding: Finding) -> str:
    return finding.span.text(text)


# ---- the public contract ------------------------------------------------------------------------


def test_every_check_has_code_severity_title_and_a_docs_section():
    docs = DOCS_FILE.read_text()
    codes = [module.CODE for module in CHECKS]
    assert len(codes) == len(set(codes))
    for module in CHECKS:
        assert module.SEVERITY in ("error", "warning", "information", "hint")
        assert module.TITLE
        assert f'<a id="{module.CODE.lower()}"></a>' in docs, module.CODE
        assert f"## {module.CODE}" in docs


def test_repository_docs_and_packaged_docs_are_the_same_file():
    assert (ROOT / "docs" / "checks.md").read_text() == DOCS_FILE.read_text()


def test_docs_url_is_a_file_uri_to_the_packaged_reference_with_an_anchor():
    text = HEADER + "@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    tl.arange(0, 12)\n"
    (finding,) = findings(text)
    url = urlparse(finding.docs_url)
    assert url.scheme == "file" and url.fragment == "mtmc101"
    assert Path(url.path) == DOCS_FILE.resolve() and DOCS_FILE.exists()


def test_finding_to_json_has_lsp_range_and_data():
    text = HEADER + "@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    tl.arange(0, 12)\n"
    (finding,) = findings(text)
    data = finding.to_json()
    assert data["range"] == {"start": {"line": 5, "character": 4}, "end": {"line": 5, "character": 20}}
    assert data["code"] == "MTMC101" and data["severity"] == "error" and data["kernel"] == "k"
    assert data["data"]["size"] == 12 and data["data"]["suggestion"] == 16  # round up, mask the rest
    assert (data["data"]["lower"], data["data"]["upper"]) == (8, 16)


def test_finding_rejects_unknown_severity():
    span = analyze("x = 1\n").syntax_error
    with pytest.raises(ValueError):
        Finding("MTMC999", "fatal", span, "m", "u")


# ---- MTMC001 ------------------------------------------------------------------------------------


def test_syntax_error_is_reported_on_its_line():
    text = HEADER + "@triton.jit\ndef k(x:\n    pass\n"
    (finding,) = findings(text)
    assert finding.code == "MTMC001" and finding.severity == "error"
    assert "syntax error" in finding.message


def test_stale_analysis_keeps_kernel_findings_and_says_so():
    good = HEADER + "@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    tl.arange(0, 12)\n"
    previous = analyze(good)
    broken = analyze(good + "def oops(:\n", previous=previous)
    result = run_checks(broken, H100)
    assert {f.code for f in result} == {"MTMC001", "MTMC101"}
    assert "last version that parsed" in next(f for f in result if f.code == "MTMC001").message


# ---- MTMC101 ------------------------------------------------------------------------------------

ARANGE_KERNEL = HEADER + '''@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)
'''


def test_arange_literal_not_power_of_2():
    text = HEADER + "@triton.jit\ndef k(x):\n    a = tl.arange(0, 48)\n    b = tl.arange(16, 80)\n    c = tl.arange(0, 96 - 32)\n"
    result = findings(text, code="MTMC101")
    assert [spanned(text, f) for f in result] == ["tl.arange(0, 48)"]
    assert "48" in result[0].message and "32 or 64" in result[0].message


def test_arange_size_from_launch_keyword_reports_at_the_keyword():
    text = ARANGE_KERNEL + "\ndef run(x, n):\n    k[(n,)](x, n, BLOCK=100)\n    k[(n,)](x, n, BLOCK=128)\n"
    (finding,) = findings(text, code="MTMC101")
    assert spanned(text, finding) == "BLOCK=100"
    assert "100" in finding.message and "64 or 128" in finding.message and "line" in finding.message


def test_arange_size_from_positional_launch_argument_and_local_constant():
    text = ARANGE_KERNEL + "\ndef run(x, n):\n    B = 3 * 100\n    k[(n,)](x, n, B)\n"
    (finding,) = findings(text, code="MTMC101")
    assert spanned(text, finding) == "B" and "300" in finding.message


def test_arange_size_from_default_and_module_constant():
    text = HEADER + "SIZE = 24\n\n@triton.jit\ndef k(x, BLOCK: tl.constexpr = SIZE):\n    tl.arange(0, BLOCK)\n"
    (finding,) = findings(text, code="MTMC101")
    assert "default of BLOCK" in finding.message and "24" in finding.message


def test_arange_size_from_autotune_config_reports_at_the_config_entry():
    text = HEADER + '''@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 192})], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)
'''
    (finding,) = findings(text, code="MTMC101")
    assert spanned(text, finding) == '"BLOCK": 192'
    assert "autotune config 1" in finding.message


def test_block_shape_dimensions_must_be_powers_of_2():
    text = HEADER + "@triton.jit\ndef k(x, BM: tl.constexpr = 64, BN: tl.constexpr = 48):\n    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    (finding,) = findings(text, code="MTMC101")
    assert "block shape dimension 48" in finding.message


def test_arange_quiet_for_powers_of_2_and_unknown_sizes():
    text = ARANGE_KERNEL + "\ndef run(x, n, b):\n    k[(n,)](x, n, BLOCK=256)\n    k[(n,)](x, n, BLOCK=triton.next_power_of_2(n))\n    k[(n,)](x, n, BLOCK=b)\n"
    assert findings(text, code="MTMC101") == []


def test_arange_span_is_utf16_after_astral_characters():
    text = HEADER + "@triton.jit\ndef k(x):\n    s = '\U0001F600'; a = tl.arange(0, 12)\n"
    (finding,) = findings(text, code="MTMC101")
    assert spanned(text, finding) == "tl.arange(0, 12)"
    # "    s = '" is 9 units, the emoji 2, then "'; a = " 7: the call starts at UTF-16 column 18
    assert finding.span.start.character == 18


# ---- MTMC102 ------------------------------------------------------------------------------------

DOT_KERNEL = HEADER + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=rn[None, :] < N)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)
'''


def test_dot_with_small_k_fires_at_the_dot():
    text = DOT_KERNEL + "\ndef run(a, b, c, M, N, K):\n    mm[(M,)](a, b, c, M, N, K, BM=64, BN=64, BK=8)\n"
    (finding,) = findings(text, code="MTMC102")
    assert spanned(text, finding) == "tl.dot(a, b)"
    assert "K=8" in finding.message and "64x8" in finding.message and ">= 16" in finding.message


def test_dot_small_m_from_block_pointer_shapes():
    text = HEADER + '''@triton.jit
def mm(a_ptr, b_ptr, M, N, K, BM: tl.constexpr = 8, BN: tl.constexpr = 32, BK: tl.constexpr = 32):
    a_block = tl.make_block_ptr(a_ptr, (M, K), (K, 1), (0, 0), block_shape=(BM, BK), order=(1, 0))
    b_block = tl.make_block_ptr(b_ptr, (K, N), (N, 1), (0, 0), block_shape=(BK, BN), order=(1, 0))
    a = tl.load(a_block, boundary_check=(0, 1))
    b = tl.load(b_block, boundary_check=(0, 1))
    c = tl.dot(a, b)
'''
    (finding,) = findings(text, code="MTMC102")
    assert "M=8" in finding.message


def test_dot_quiet_at_16_and_when_shapes_unknown():
    text = DOT_KERNEL + "\ndef run(a, b, c, M, N, K, bk):\n    mm[(M,)](a, b, c, M, N, K, BM=16, BN=16, BK=16)\n    mm[(M,)](a, b, c, M, N, K, BM=64, BN=64, BK=bk)\n"
    assert findings(text, code="MTMC102") == []


# ---- MTMC103 ------------------------------------------------------------------------------------

UNMASKED = HEADER + '''@triton.jit
def k(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x)
'''


def test_unmasked_load_and_store_on_program_id_offsets_fire():
    result = findings(UNMASKED, code="MTMC103")
    assert [spanned(UNMASKED, f) for f in result] == ["tl.load(x_ptr + offs)", "tl.store(y_ptr + offs, x)"]
    assert all(f.severity == "warning" and "n_elements" in f.message and "offs" in f.message for f in result)


def test_unmasked_quiet_with_mask_modulo_block_pointer_or_guard():
    masked = UNMASKED.replace("tl.load(x_ptr + offs)", "tl.load(x_ptr + offs, mask=offs < n_elements)").replace(
        "tl.store(y_ptr + offs, x)", "tl.store(y_ptr + offs, x, offs < n_elements)")
    wrapped = UNMASKED.replace("offs = pid * BLOCK + tl.arange(0, BLOCK)", "offs = (pid * BLOCK + tl.arange(0, BLOCK)) % n_elements")
    guarded = HEADER + '''@triton.jit
def k(x_ptr, n_elements, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n_elements)
'''
    no_bound = UNMASKED.replace("n_elements", "stride_x")
    per_program_scalar = HEADER + "@triton.jit\ndef k(out_ptr, n_rows):\n    row = tl.program_id(0)\n    tl.store(out_ptr + row, 1.0)\n"
    for text in (masked, wrapped, guarded, no_bound, per_program_scalar):
        assert findings(text, code="MTMC103") == [], text


def test_unmasked_chain_through_augmented_pointer():
    text = HEADER + '''@triton.jit
def k(X, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    cols = tl.arange(0, BLOCK)
    tl.store(X + cols, 0.0)
'''
    (finding,) = findings(text, code="MTMC103")
    assert "n_cols" in finding.message
    # The program id only picks a row (times a stride): the risk is the block's length, not "the last program".
    assert "only pick a row, head or batch" in finding.message and "last program" not in finding.message
    assert all("the last program reads or writes" in f.message for f in findings(UNMASKED, code="MTMC103"))



def test_unmasked_quiet_when_offsets_are_clamped_and_the_program_id_picks_a_head():
    # lightllm's scaled fp8 bmm: the row offsets wrapped into range with tl.where, the head a scalar program id.
    clamped = HEADER + '''@triton.jit
def k(scale_ptr, M, stride_h, BLOCK_M: tl.constexpr):
    pid_m = tl.program_id(0)
    head_id = tl.program_id(1)
    offs_am = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_am = tl.where(offs_am < M, offs_am, 0)
    offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_M), BLOCK_M)
    scale_ptrs = scale_ptr + head_id * stride_h + offs_am
    s = tl.load(scale_ptrs)
'''
    assert findings(clamped, code="MTMC103") == []
    # Beside an unclamped block of offsets, or without the clamp: still a warning.
    beside = clamped.replace("scale_ptrs = scale_ptr + head_id * stride_h + offs_am",
                             "scale_ptrs = scale_ptr + head_id * stride_h + offs_am + tl.arange(0, BLOCK_M)")
    assert len(findings(beside, code="MTMC103")) == 1
    unclamped = clamped.replace("    offs_am = tl.where(offs_am < M, offs_am, 0)\n", "")
    assert len(findings(unclamped, code="MTMC103")) == 1


WHOLE_TILES = HEADER + '''@triton.jit
def row_mean(x_ptr, out_ptr, N, TILE_N: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((TILE_N,), dtype=tl.float32)
    num_steps = tl.cdiv(N, TILE_N)
    for step in range(0, num_steps - 1):
        start_n = step * TILE_N
        offs = start_n + tl.arange(0, TILE_N)
        ptrs = x_ptr + pid * N + offs
        acc += tl.load(ptrs)
    offs = (num_steps - 1) * TILE_N + tl.arange(0, TILE_N)
    acc += tl.load(x_ptr + pid * N + offs, mask=offs < N, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc) / N)
'''


@pytest.mark.parametrize("loop", [
    "for step in range(0, num_steps - 1):",  # FlagGems' norms: whole tiles, then a masked last one
    "for step in range(N // TILE_N):",  # mask_free_k's spelling
    "for step in tl.range(0, tl.cdiv(N, TILE_N) - 1, num_stages=2):",
])
def test_unmasked_quiet_in_a_loop_over_whole_tiles(loop):
    text = WHOLE_TILES.replace("for step in range(0, num_steps - 1):", loop)
    assert findings(text, code="MTMC103") == [], loop


@pytest.mark.parametrize("loop", [
    "for step in range(0, num_steps):",  # the last, partial tile too
    "for step in range(0, tl.cdiv(N, TILE_N)):",
    "for step in range(0, N // TILE_N + 1):",
    "for step in range(0, N):",  # steps by one, tiles overlap the end
])
def test_unmasked_warns_when_the_loop_reaches_past_the_last_whole_tile(loop):
    text = WHOLE_TILES.replace("for step in range(0, num_steps - 1):", loop)
    (finding,) = findings(text, code="MTMC103")
    assert finding.span.start.line == text.splitlines().index("        acc += tl.load(ptrs)")


def test_whole_tiles_by_a_stepped_offset_and_only_under_the_loop_bound():
    stepped = WHOLE_TILES.replace("for step in range(0, num_steps - 1):\n        start_n = step * TILE_N",
                                  "for start_n in range(0, N - TILE_N + 1, TILE_N):")
    assert "start_n in range(0, N - TILE_N + 1" in stepped and findings(stepped, code="MTMC103") == []
    carried = WHOLE_TILES.replace("        start_n = step * TILE_N\n", "").replace(
        "offs = start_n +", "offs = start +").replace("    num_steps = tl.cdiv(N, TILE_N)\n",
                                                        "    num_steps = tl.cdiv(N, TILE_N)\n    start = 0\n")
    carried = carried.replace("        acc += tl.load(ptrs)\n", "        acc += tl.load(ptrs)\n        start += TILE_N\n")
    assert len(findings(carried, code="MTMC103")) == 1  # a value carried across iterations is not read
    moving = WHOLE_TILES.replace("ptrs = x_ptr + pid * N + offs", "ptrs = x_ptr + pid * TILE_N + offs")
    assert len(findings(moving, code="MTMC103")) == 1  # the program id moves a tile: not a row pick


# FlagGems' instance norm sweeps its row backwards from the last whole tile, found by a one-line jit helper.
PREV_MULTIPLE = HEADER + '''@triton.jit
def prev_multiple_of(a, b):
    # the largest x < a that is a multiple of b
    return tl.cdiv(a, b) * b - b


@triton.jit
def k(x_ptr, y_ptr, N, TILE_N: tl.constexpr):
    pid = tl.program_id(0)
    prev_multiple = prev_multiple_of(N, TILE_N)
    total = 0.0
    for start_n in range(0, N, TILE_N):  # a first, masked sweep (FlagGems' statistics)
        n_offsets = start_n + tl.arange(0, TILE_N)
        total += tl.sum(tl.load(x_ptr + pid * N + n_offsets, mask=n_offsets < N, other=0.0))
    tl.store(y_ptr + pid, total)
    for start_n in range(TILE_N, N, TILE_N):
        n_offsets = (prev_multiple - start_n) + tl.arange(0, TILE_N)
        x = tl.load(x_ptr + pid * N + n_offsets)
        tl.store(y_ptr + pid * N + n_offsets, x)
'''


def test_whole_tiles_read_through_a_one_line_jit_helper():
    assert findings(PREV_MULTIPLE, code="MTMC103") == []
    # one more step reaches the partial tile: the helper's value is read, not trusted
    assert len(findings(PREV_MULTIPLE.replace("range(TILE_N, N, TILE_N)", "range(TILE_N - TILE_N, N, TILE_N)"),
                        code="MTMC103")) == 2
    # a helper of more than one return statement is not read: the warning stays
    two_lines = PREV_MULTIPLE.replace("    return tl.cdiv(a, b) * b - b\n", "    c = tl.cdiv(a, b)\n    return c * b - b\n")
    assert len(findings(two_lines, code="MTMC103")) == 2


def test_unmasked_names_the_size_its_offsets_are_compared_with():
    # FlagGems' instance norm: M rows, N columns; the last tile compares the offsets with N, so N is the fix.
    text = HEADER + '''@triton.jit
def k(x_ptr, y_ptr, M, N, TILE_N: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, TILE_N)
    x = tl.load(x_ptr + pid * N + offs)
    tl.store(y_ptr + pid * N + offs, x, mask=offs < N)
'''
    (finding,) = findings(text, code="MTMC103")
    assert finding.message.endswith("add mask=... < N")
    assert findings(text.replace("mask=offs < N", "mask=None"), code="MTMC103")[0].message.endswith("< M")


# ---- MTMC104 ------------------------------------------------------------------------------------


def test_shared_memory_estimate_over_the_limit_names_bytes_and_limit():
    text = DOT_KERNEL + "\ndef run(a, b, c, M, N, K):\n    mm[(M,)](a, b, c, M, N, K, BM=256, BN=256, BK=128, num_stages=4)\n"
    (finding,) = findings(text, code="MTMC104")
    expected = (256 * 128 + 128 * 256) * 2 * 4
    assert f"{expected:,}" in finding.message and f"{H100.max_shared_per_block:,}" in finding.message
    assert "2-byte" in finding.message  # the dtype assumption is stated
    assert finding.data["bytes"] == expected and "mm[(M,)]" in spanned(text, finding)


def test_shared_memory_depends_on_target_and_known_dtype():
    text = DOT_KERNEL + "\ndef run(a, b, c, M, N, K):\n    mm[(M,)](a, b, c, M, N, K, BM=128, BN=128, BK=128, num_stages=3)\n"
    # (128*128 + 128*128) * 2 * 3 = 196,608 bytes: fits an H100 (232,448), not an A100 (166,912)
    assert findings(text, H100, "MTMC104") == []
    assert len(findings(text, A100, "MTMC104")) == 1
    fp32 = text.replace("acc += tl.dot(a, b)", "acc += tl.dot(a.to(tl.float32), b.to(tl.float32))")
    (finding,) = findings(fp32, H100, "MTMC104")
    assert "4-byte and 4-byte" in finding.message


def test_shared_memory_uses_default_stages_and_autotune_configs():
    text = HEADER + '''@triton.autotune(configs=[triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_stages=2),
                          triton.Config({"BM": 256, "BN": 256, "BK": 64}, num_stages=5)], key=["M"])
''' + DOT_KERNEL[len(HEADER):]
    (finding,) = findings(text, code="MTMC104")
    assert "autotune config 1" in finding.message and "5 stages" in finding.message


# ---- MTMC105 ------------------------------------------------------------------------------------


def test_num_warps_not_power_of_2_at_launch_and_config():
    text = HEADER + '''@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=6)], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass

def run(x, n):
    k[(n,)](x, n, num_warps=12)
    k[(n,)](x, n, num_warps=8)
'''
    result = findings(text, code="MTMC105")
    assert [spanned(text, f) for f in result] == ["num_warps=6", "num_warps=12"]
    assert "use 4 or 8" in result[0].message and "use 8 or 16" in result[1].message


# ---- MTMC106 ------------------------------------------------------------------------------------


def test_small_constant_grid_fires_with_sm_counts():
    text = ARANGE_KERNEL + "\ndef run(x, n):\n    k[(4, 8)](x, n, BLOCK=128)\n    k[(132,)](x, n, BLOCK=128)\n"
    (finding,) = findings(text, code="MTMC106")
    assert spanned(text, finding) == "(4, 8)"
    assert "32 programs" in finding.message and "132 SMs" in finding.message
    assert findings(text, get_profile("v100"), "MTMC106")[0].data["sm_count"] == 80


def test_a_single_program_grid_is_a_note_not_a_warning():
    # The combine stage of a two-stage reduction launches one program on purpose.
    text = ARANGE_KERNEL + "\ndef run(x, n):\n    k[(1,)](x, n, BLOCK=128)\n    k[(2,)](x, n, BLOCK=128)\n"
    one, two = findings(text, code="MTMC106")
    assert one.severity == "information" and "one program" in one.message and spanned(text, one) == "(1,)"
    assert two.severity == "warning" and "2 programs" in two.message


def test_a_small_grid_the_kernel_strides_by_is_a_note():
    # lightllm's KV-cache transfer keeps 20 programs on purpose and walks the tokens with that stride.
    text = HEADER + '''@triton.jit
def copy_kernel(src_ptr, dst_ptr, n_tokens, grid_count, BLOCK: tl.constexpr):
    tid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    while tid < n_tokens:
        tl.store(dst_ptr + tid * BLOCK + cols, tl.load(src_ptr + tid * BLOCK + cols))
        tid += grid_count


def run(src, dst, n_tokens):
    grid_count = 20
    copy_kernel[(grid_count,)](src, dst, n_tokens, grid_count, BLOCK=128)
'''
    (finding,) = findings(text, code="MTMC106")
    assert finding.severity == "information" and "walks its work with that stride" in finding.message
    # The same count passed but never stepped by (a row count the kernel masks with): still a warning.
    masked = text.replace("        tid += grid_count\n", "        tid += n_tokens\n")
    assert findings(masked, code="MTMC106")[0].severity == "warning"

def test_grid_from_lambda_and_constants_and_quiet_for_runtime_grids():
    text = ARANGE_KERNEL + '''
N = 4096

def run(x, n):
    k[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, n, BLOCK=1024)
    k[(triton.cdiv(n, 128),)](x, n, BLOCK=128)
'''
    (finding,) = findings(text, code="MTMC106")
    assert "4 programs" in finding.message


# ---- whole files --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", sorted(PROFILES))
@pytest.mark.parametrize("example", ["matmul.py", "softmax.py", "gelu_bias.py"])
def test_bundled_examples_are_quiet(example, target):
    assert run_checks(analyze((EXAMPLES / example).read_text()), get_profile(target)) == []


def test_a_broken_check_does_not_hide_the_others(monkeypatch):
    from mtmc_lsp.optimizer.checks import grid_fill

    def boom(ctx):
        raise RuntimeError("bug")
        yield

    monkeypatch.setattr(grid_fill, "check", boom)
    assert [f.code for f in findings(UNMASKED)] == ["MTMC103", "MTMC103"]


def _big_file(kernels: int = 40) -> str:
    body = (EXAMPLES / "matmul.py").read_text().split("import triton.language as tl\n", 1)[1].split("def get_inputs")[0]
    parts = ["import torch\nimport triton\nimport triton.language as tl\n"]
    for i in range(kernels):
        parts.append(body.replace("matmul_kernel", f"matmul_kernel_{i}").replace("def matmul(", f"def matmul_{i}("))
    return "\n".join(parts)


def test_run_checks_on_2000_lines_with_40_kernels_is_fast():
    """Measured against parsing the same text once, so a loaded CI machine does not make it flaky.

    Measured on the 2-core machine under load (4-5 on 2 CPUs): a cold run 12-16 ms CPU against
    20 ms for the parse (the checks walk the analysis' own syntax tree; parsing every kernel again
    cost 13-19 ms more), a warm run (kernels unchanged since the last run) 4-6 ms; the server's
    budget for first diagnostics is 150 ms p95.
    """
    import ast

    text = _big_file(40)
    assert text.count("\n") >= 2000
    analysis = analyze(text)
    assert len(analysis.kernels) == 40
    parse, cold = [], []
    for _ in range(3):
        start = time.process_time()
        ast.parse(text)
        parse.append(time.process_time() - start)
        clear_facts_cache()
        start = time.process_time()
        run_checks(analysis, H100)
        cold.append(time.process_time() - start)
    start = time.process_time()
    run_checks(analysis, H100)
    warm = time.process_time() - start
    assert min(cold) < 1.5 * min(parse) + 0.003, (cold, parse)
    assert min(cold) < 0.150, cold  # even on a loaded machine
    assert warm < min(parse), (warm, parse)


def test_checks_walk_the_analysis_tree_and_cached_facts_follow_a_moved_kernel(monkeypatch):
    """No second parse for kernels the analysis parsed; facts cached by source stay right when the kernel moves."""
    text = (EXAMPLES / "matmul.py").read_text().replace("num_warps=4", "num_warps=6").replace(", mask=", ", xmask=")
    clear_facts_cache()
    reference = run_checks(analyze(text), H100)
    assert {"MTMC103", "MTMC105"} <= {f.code for f in reference}

    def no_parse(*args, **kwargs):
        raise AssertionError("the checks parsed a kernel again")

    clear_facts_cache()
    monkeypatch.setattr(check_facts, "_parsed_facts", no_parse)
    assert run_checks(analyze(text), H100) == reference
    monkeypatch.undo()
    # Three lines above every kernel: the cached facts (built from the first tree) map to the new lines.
    moved_text = "# one\n# two\n# three\n" + text
    moved = run_checks(analyze(moved_text), H100)
    assert [(f.code, f.message) for f in moved] == [(f.code, f.message) for f in reference]
    assert [f.span.start.line for f in moved] == [f.span.start.line + 3 for f in reference]
    assert [f.span.text(moved_text) for f in moved] == [f.span.text(text) for f in reference]
    # A kernel without the analysis' node (built by hand) is parsed from its source: same findings.
    clear_facts_cache()
    analysis = analyze(text)
    for kernel in analysis.kernels:
        kernel.node = None
    assert run_checks(analysis, H100) == reference


def test_indented_kernels_from_the_file_tree_match_a_parse_of_their_source():
    body = (EXAMPLES / "matmul.py").read_text().replace("num_warps=4", "num_warps=6").replace(", mask=", ", xmask=")
    text = "def factory():\n" + "".join("    " + line if line.strip() else line for line in body.splitlines(True))
    clear_facts_cache()
    analysis = analyze(text)
    assert analysis.kernels and analysis.kernels[0].def_span.start.character == 4
    from_tree = run_checks(analysis, H100)
    clear_facts_cache()
    for kernel in analysis.kernels:
        kernel.node = None
    from_source = run_checks(analysis, H100)
    assert from_tree == from_source and "MTMC103" in {f.code for f in from_tree}
