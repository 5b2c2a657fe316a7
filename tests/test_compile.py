"""Compilation for a target GPU without a GPU: module building, signatures, plans, findings, real compiles."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.compile import (
    CompileJob,
    CompileReport,
    CompileSetupError,
    build_module,
    clear_memory_cache,
    compile_findings,
    compile_jobs,
    compile_kernel,
    default_signature,
    plan_jobs,
)
from mtmc_lsp.optimizer.hardware import get_profile

CORPUS = Path(__file__).resolve().parent / "corpus" / "realworld"
H100, A100 = get_profile("h100"), get_profile("a100")

SMALL_MATMUL = '''import torch
import triton
import triton.language as tl

SCALE = tl.constexpr(2)


@triton.jit
def _scale(x):
    return x * SCALE


@triton.autotune(configs=[triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=2)], key=["M"])
@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], _scale(acc).to(tl.float16))


def host(a, b, c):
    data = torch.load("weights.pt")
    mm[(1, 1)](a, b, c, 32, 32, 32)
'''


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MTMC_CACHE_DIR", str(tmp_path / "cache"))
    clear_memory_cache()
    yield
    clear_memory_cache()


# ---- the module the worker compiles -----------------------------------------------------------


def test_built_module_keeps_line_numbers_and_only_what_the_kernel_needs():
    built = build_module(SMALL_MATMUL, "mm")
    original, lines = SMALL_MATMUL.splitlines(), built.text.splitlines()
    assert len(lines) == len(original)
    def_line = original.index("def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):")
    assert lines[def_line] == original[def_line] and built.def_line == def_line + 1
    assert "import torch" not in built.text and "torch.load" not in built.text  # host code stays out
    assert "SCALE = tl.constexpr(2)" in built.text and "def _scale(x):" in built.text  # constants and jit helpers stay in
    assert "autotune" not in built.text and "@triton.jit" in built.text
    compile(built.text, "<built>", "exec")


def test_built_module_moves_a_factory_kernel_to_module_level():
    text = (CORPUS / "kernel_factory.py").read_text()
    built = build_module(text, "row_sum_kernel")
    line = next(i for i, l in enumerate(text.splitlines()) if "def row_sum_kernel" in l)
    assert built.text.splitlines()[line].startswith("def row_sum_kernel(")
    compile(built.text, "<built>", "exec")


def test_built_module_jits_a_def_jitted_by_a_call_with_the_jit_call_alone():
    text = (CORPUS / "jit_by_call.py").read_text()
    lines = text.splitlines()
    for kernel, jitting in (("scale_rows", "scale_rows = triton.jit(scale_rows)"),
                            ("_shift", "_shift = triton.jit(do_not_specialize=['shift'])(_shift)"),
                            ("_square", "_square = triton.jit(_square)")):  # autotune dropped: the caller picks
        built = build_module(text, kernel).text.splitlines()
        assert len(built) == len(lines)
        line = next(i for i, l in enumerate(lines) if l.startswith(f"def {kernel}("))
        assert built[line] == lines[line]
        assert [l for l in built[line:] if " = " in l and not l.startswith(" ")] == [jitting]
        assert "def shift(" not in "\n".join(built)  # _shift's parameter `shift` is not the host function
        compile("\n".join(built), "<built>", "exec")


def test_build_module_errors_are_clear():
    with pytest.raises(CompileSetupError, match="no @triton.jit function named nope"):
        build_module(SMALL_MATMUL, "nope")
    with pytest.raises(CompileSetupError, match="does not parse"):
        build_module("def broken(:\n", "broken")


# ---- signatures and plans ---------------------------------------------------------------------


def test_default_signature_pointers_scalars_floats_and_overrides():
    analysis = analyze((CORPUS / "layernorm.py").read_text())
    sig = default_signature(analysis.kernel("_layer_norm_fwd_fused"))
    assert sig["X"] == "*fp32" and sig["N"] == "i32" and sig["eps"] == "fp32" and sig["BLOCK_SIZE"] == "constexpr"
    mm = analyze(SMALL_MATMUL).kernel("mm")
    assert default_signature(mm)["a_ptr"] == "*fp16"  # a tl.dot kernel: tensor-core inputs
    assert default_signature(mm, {"a_ptr": "*bf16", "BM": "i32"})["a_ptr"] == "*bf16"
    assert default_signature(mm, {"BM": "i32"})["BM"] == "constexpr"


def test_signature_rules_for_int_pointers_helper_dots_and_pointers_used_in_helpers():
    from mtmc_lsp.optimizer.compile.compiler import uses_dot

    layernorm = analyze((CORPUS / "layernorm.py").read_text())
    bwd = layernorm.kernel("_layer_norm_bwd_dx_fused")
    sig = default_signature(bwd, body=bwd.def_span.text(layernorm.text))
    assert sig["Lock"] == "*i32" and sig["DX"] == "*fp32"  # tl.atomic_cas(Lock, 0, 1): an int lock
    attention = analyze((CORPUS / "flash_attention_fwd.py").read_text())
    fwd = attention.kernel("_attn_fwd")
    assert uses_dot(attention, fwd) and not fwd.calls_of("dot")  # the dots are in _attn_fwd_inner
    sig = default_signature(fwd, body=fwd.def_span.text(attention.text), dot=uses_dot(attention, fwd))
    assert sig["K"] == sig["V"] == sig["Q"] == "*fp16"  # K_ptrs = K + ...: K is a pointer
    assert sig["sm_scale"] == "fp32" and sig["N_CTX"] == "i32"


def test_plan_uses_launches_configs_and_defaults():
    analysis = analyze((CORPUS / "multi_kernel.py").read_text())
    planned = plan_jobs(analysis, H100)
    jobs = {p.job.kernel: p.job for p in planned}
    assert jobs["relu_kernel"].constexprs == {"BLOCK_SIZE": 1024}
    assert jobs["bias_add_kernel"].constexprs == {}  # triton.next_power_of_2(n_cols) is a runtime value
    autotuned = plan_jobs(analyze((CORPUS / "matmul_heuristics.py").read_text()), H100)
    unit = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}  # from a.stride(1), b.stride(1), c.stride(1)
    assert [(p.job.constexprs, p.job.num_warps, p.job.num_stages) for p in autotuned] == [
        ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, **unit}, 4, 3),
        ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, **unit}, 4, 5),
    ]
    assert all(p.job.label.startswith("autotune config") for p in autotuned)
    unlaunched = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, B: tl.constexpr = 256, D: tl.constexpr = False):\n    pass\n"
    (planned,) = plan_jobs(analyze(unlaunched), H100)
    assert planned.job.constexprs == {"B": 256, "D": False} and planned.job.label == "the parameter defaults"
    assert (planned.job.num_warps, planned.job.num_stages) == (4, 3)


def test_missing_constexpr_is_skipped_with_a_reason_without_a_worker():
    start = time.monotonic()
    report = compile_kernel(SMALL_MATMUL, "mm", {"BM": 32}, H100)
    assert time.monotonic() - start < 2
    assert report.status == "skipped" and "no value for constexpr BN, BK" in report.error


def test_heuristic_constexpr_and_host_descriptors_are_skipped():
    text = (CORPUS / "tensor_descriptor.py").read_text()
    report = compile_kernel(text, "copy_with_host_descriptor", {"BLOCK": 64}, H100)
    assert report.status == "skipped" and "in_desc, out_desc" in report.error


# ---- findings from reports --------------------------------------------------------------------


def _report(**fields) -> CompileReport:
    base = dict(kernel="mm", target="h100", arch=90, constexprs={"BM": 32}, num_warps=4, num_stages=3, signature={},
                status="ok", label="autotune config 0", registers=96, spill_stores=0, spill_loads=0, shared_bytes=8192,
                compile_s=1.5)
    base.update(fields)
    return CompileReport(**base)


def test_compile_findings_error_spills_shared_summary_and_skipped():
    analysis = analyze(SMALL_MATMUL)
    line = SMALL_MATMUL.splitlines().index("        acc += tl.dot(a, b)") + 1
    reports = [
        _report(status="error", error="CompilationError: bad dot", error_line=line, registers=None),
        _report(registers=255, spill_stores=416, spill_loads=396),
        _report(shared_bytes=300_000),
        _report(status="skipped", error="no value for constexpr BK"),
    ]
    found = compile_findings(analysis, reports, H100)
    by_code = {}
    for finding in found:
        by_code.setdefault(finding.code, []).append(finding)
    (error,) = by_code["MTMC201"]
    assert error.severity == "error" and error.span.start.line == line - 1
    assert error.span.text(SMALL_MATMUL) == "acc += tl.dot(a, b)" and "bad dot" in error.message
    (spill,) = by_code["MTMC202"]
    assert "255 registers/thread" in spill.message and "416 bytes spill stores" in spill.message
    (shared,) = by_code["MTMC203"]
    assert "300,000 bytes" in shared.message and "232,448-byte limit" in shared.message
    assert len(by_code["MTMC200"]) == 2 and by_code["MTMC204"][0].severity == "hint"
    assert all(f.docs_url.endswith(f"#{f.code.lower()}") for f in found)


def test_the_same_error_under_several_configs_is_reported_once():
    analysis = analyze(SMALL_MATMUL)
    reports = [_report(status="error", error="E", error_line=20), _report(status="error", error="E", error_line=20)]
    assert len(compile_findings(analysis, reports, H100)) == 1


# ---- real compiles (a few seconds each on the 2-core machine) --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("target", [H100, A100], ids=["sm_90", "sm_80"])
def test_real_compile_reports_registers_and_shared_memory(target):
    report = compile_kernel(SMALL_MATMUL, "mm", {"BM": 32, "BN": 32, "BK": 32}, target, num_warps=4, num_stages=2)
    assert report.status == "ok", report.error
    assert report.arch == target.arch and report.registers > 0 and report.shared_bytes > 0
    assert report.spills == 0 and report.cubin_bytes > 0 and report.ptx_bytes > 0 and report.compile_s > 0
    again = compile_kernel(SMALL_MATMUL, "mm", {"BM": 32, "BN": 32, "BK": 32}, target, num_warps=4, num_stages=2)
    assert again.cached and again.registers == report.registers
    clear_memory_cache()  # the disk cache answers too
    from_disk = compile_kernel(SMALL_MATMUL, "mm", {"BM": 32, "BN": 32, "BK": 32}, target, num_warps=4, num_stages=2)
    assert from_disk.cached and from_disk.shared_bytes == report.shared_bytes


@pytest.mark.slow
def test_type_error_reports_the_file_line():
    text = (CORPUS / "compile_type_error.py").read_text()
    report = compile_kernel(text, "broken_dot", {"BLOCK": 128}, H100)
    assert report.status == "error"
    assert report.error_line == text.splitlines().index("    y = tl.dot(x, x)") + 1
    assert "rank" in report.error


@pytest.mark.slow
def test_errors_in_helpers_and_module_constants_point_at_their_lines():
    text = SMALL_MATMUL.replace("    return x * SCALE", "    return tl.dot(x, SCALE)")
    report = compile_kernel(text, "mm", {"BM": 32, "BN": 32, "BK": 32}, H100, cache_dir=None)
    assert report.status == "error"
    assert report.error_line == text.splitlines().index("    return tl.dot(x, SCALE)") + 1
    # (math.nope would be refused before loading: only dtypes and math constants are read off modules)
    broken_constant = SMALL_MATMUL.replace("SCALE = tl.constexpr(2)", "SCALE = tl.constexpr(2 // 0)")
    report = compile_kernel(broken_constant, "mm", {"BM": 32, "BN": 32, "BK": 32}, H100, cache_dir=None)
    assert report.status == "error" and "does not load" in report.error and "ZeroDivisionError" in report.error
    assert report.error_line == broken_constant.splitlines().index("SCALE = tl.constexpr(2 // 0)") + 1


@pytest.mark.slow
def test_spills_on_a_huge_tile_and_findings_for_a_file():
    text = SMALL_MATMUL.replace('"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=2',
                                '"BM": 256, "BN": 128, "BK": 32}, num_warps=4, num_stages=3')
    from mtmc_lsp.optimizer.compile import compile_file_findings

    found, reports = compile_file_findings(analyze(text), A100, kernels=["mm"])
    (report,) = reports
    assert report.status == "ok" and report.spill_stores > 0 and report.registers >= 200
    codes = [f.code for f in found]
    assert codes == ["MTMC200", "MTMC202"] or codes == ["MTMC202", "MTMC200"]
    spill = next(f for f in found if f.code == "MTMC202")
    assert spill.span.text(text).startswith('triton.Config({"BM": 256')  # on the config that spills


@pytest.mark.slow
def test_heuristics_are_evaluated_when_they_need_only_constexprs():
    analysis = analyze((CORPUS / "matmul_heuristics.py").read_text())
    (first, _) = [p.job for p in plan_jobs(analysis, H100)]
    (runtime,) = compile_jobs(analysis.text, [first], H100, analysis=analysis)
    assert runtime.status == "skipped"
    assert "EVEN_K is set by @triton.heuristics from the runtime value of K" in runtime.error
    spellings = analyze((CORPUS / "jit_spellings.py").read_text())
    planned = [p.job for p in plan_jobs(spellings, H100, kernels=["heuristic_block"])]
    (constant,) = compile_jobs(spellings.text, planned, H100, analysis=spellings)
    assert constant.status == "ok", constant.error  # {"BLOCK": lambda args: 256}


@pytest.mark.slow
def test_timeout_is_reported_not_raised():
    report = compile_kernel(SMALL_MATMUL, "mm", {"BM": 32, "BN": 32, "BK": 32}, H100, timeout_s=0.2, cache_dir=None)
    assert report.status == "timeout" and "did not finish within" in report.error


@pytest.mark.slow
def test_one_worker_compiles_every_kernel_of_a_file():
    from mtmc_lsp.optimizer.compile import compile_file_findings

    analysis = analyze((CORPUS / "multi_kernel.py").read_text())
    found, reports = compile_file_findings(analysis, H100)
    status = {r.kernel: r.status for r in reports}
    assert status == {"relu_kernel": "ok", "bias_add_kernel": "skipped", "sum_kernel": "ok"}
    compiled = [r for r in reports if r.ok]
    assert compiled[0].wall_s == compiled[1].wall_s  # one worker run, its time shared by its jobs
    assert sorted(f.code for f in found) == ["MTMC200", "MTMC200", "MTMC204"]


@pytest.mark.slow
def test_cancel_stops_the_worker_quickly():
    import threading

    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    jobs = [CompileJob("mm", {"BM": 32, "BN": 32, "BK": 32}, 4, stages) for stages in (1, 2, 3, 4)]
    reports = compile_jobs(SMALL_MATMUL, jobs, H100, cache_dir=None, cancel=cancel)
    assert time.monotonic() - start < 2.5
    assert [r.status for r in reports] == ["cancelled"] * 4
    assert compile_findings(analyze(SMALL_MATMUL), reports, H100) == []


def test_plan_skips_helpers_that_other_kernels_call():
    exotic = analyze((CORPUS / "exotic_constructs.py").read_text())
    assert {p.job.kernel for p in plan_jobs(exotic, H100)} == {"exotic_kernel"}  # not the combine functions
    attention = analyze((CORPUS / "flash_attention_fwd.py").read_text())
    assert {p.job.kernel for p in plan_jobs(attention, H100)} == {"_attn_fwd"}


@pytest.mark.slow
def test_factory_kernel_closure_is_a_skip_not_an_error():
    text = (CORPUS / "kernel_factory.py").read_text()
    report = compile_kernel(text, "row_sum_kernel", {}, H100, cache_dir=None)
    assert report.status == "skipped"
    assert "defined inside outer() and uses block" in report.error


def test_plan_specializes_unit_strides_like_the_runtime():
    analysis = analyze((CORPUS / "matmul_autotune.py").read_text())
    planned = plan_jobs(analysis, H100)
    # One job per config of the helper the analysis evaluates (get_cuda_autotune_config()).
    assert [p.job.label for p in planned] == [f"autotune config {i}" for i in range(3)]
    for p in planned:
        assert {k: v for k, v in p.job.constexprs.items() if k.startswith("stride")} == {
            "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}


@pytest.mark.slow
def test_runtime_like_specialization_matches_the_shared_memory_estimate():
    """128x256x64, 3 stages: pipelined like at run time, so the compiled shared memory is the MTMC104 rule."""
    from mtmc_lsp.optimizer.triton_rules import dot_shared_bytes

    text = (CORPUS / "matmul_autotune.py").read_text()
    constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "ACTIVATION": "",
                  "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}
    report = compile_kernel(text, "matmul_kernel", constexprs, H100, num_warps=8, num_stages=3)
    assert report.status == "ok" and report.signature["stride_ak"] == "constexpr"
    assert report.shared_bytes == dot_shared_bytes(128, 256, 64, 2, 2, 3) == 147_456
    assert report.spills == 0


@pytest.mark.slow
def test_kernels_jitted_by_a_call_compile_and_a_factory_closure_is_a_skip():
    text = (CORPUS / "jit_by_call.py").read_text()
    report = compile_kernel(text, "_shift", {"BLOCK": 128}, H100, cache_dir=None)
    assert report.status == "ok", report.error
    factory = (CORPUS / "kernel_factory.py").read_text()  # Triton says "NameError('ACT is not defined')"
    report = compile_kernel(factory, "activation_kernel", {"BLOCK": 1024}, H100, cache_dir=None)
    assert report.status == "skipped" and "inside make_activation_kernel() and uses ACT" in report.error


@pytest.mark.slow
def test_kernel_defined_in_a_class_compiles():
    text = (CORPUS / "kernel_factory.py").read_text()
    report = compile_kernel(text, "scale_kernel", {"BLOCK": 128}, H100, cache_dir=None)
    assert report.status == "ok", report.error
    assert report.signature["factor"] == "fp32" and report.registers > 0
