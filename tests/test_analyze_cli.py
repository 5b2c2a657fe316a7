"""``mtmc analyze``: text and JSON output, exit codes, and bad input that must not crash or hang."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtmc_lsp.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "realworld"
EXAMPLES = ROOT / "mtmc_lsp" / "examples"

PLANTED = '''import triton
import triton.language as tl


@triton.jit
def add(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def run(x, y, n):
    add[(64,)](x, y, n, BLOCK=100, num_warps=3)
'''


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["analyze", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_output_lists_kernels_launches_and_diagnostics(tmp_path, capsys):
    path = tmp_path / "planted.py"
    path.write_text(PLANTED)
    code, out, _ = run_cli(capsys, str(path), "--target", "a100")
    assert code == 1  # MTMC101/MTMC105 are errors
    assert f"{path}: 1 kernel" in out
    assert "kernel add (line 6): x_ptr*, y_ptr*, n_elements, BLOCK: constexpr" in out
    assert "launch line 12 in run: grid (64,)" in out and "num_warps=3" in out
    lines = [line for line in out.splitlines() if line.startswith(f"{path}:")]
    assert f"{path}:12:25: MTMC101 error tl.arange size 100" in "\n".join(lines)
    assert any(":12:9: MTMC106 warning" in line and "108 SMs" in line for line in lines)
    assert any(":12:36: MTMC105 error num_warps=3" in line for line in lines)
    assert sum(":8:" in line and "MTMC103" in line for line in lines) == 2


def test_json_output_is_machine_readable(tmp_path, capsys):
    path = tmp_path / "planted.py"
    path.write_text(PLANTED)
    code, out, _ = run_cli(capsys, str(path), "--json", "--target", "h100")
    assert code == 1
    data = json.loads(out)
    assert data["target"] == "h100"
    (result,) = data["files"]
    assert result["error"] is None
    (kernel,) = result["kernels"]
    assert kernel["name"] == "add" and kernel["launches"][0]["grid_value"] == [64]
    assert kernel["launches"][0]["constexprs"] == {"BLOCK": 100}
    codes = [(d["code"], d["line"], d["severity"]) for d in result["diagnostics"]]
    assert ("MTMC101", 12, "error") in codes and ("MTMC106", 12, "warning") in codes
    assert all(d["docsUrl"].startswith("file://") and "#mtmc" in d["docsUrl"] for d in result["diagnostics"])
    assert result["diagnostics"][0]["range"]["start"]["line"] == result["diagnostics"][0]["line"] - 1


def test_clean_files_exit_zero(capsys):
    code, out, _ = run_cli(capsys, *(str(p) for p in sorted(EXAMPLES.glob("*.py"))))
    assert code == 0
    assert "MTMC" not in out and "kernel matmul_kernel" in out


def test_whole_corpus_runs_without_a_crash(capsys):
    files = sorted(str(p) for p in CORPUS.glob("*.py"))
    code, out, err = run_cli(capsys, *files, "--json")
    data = json.loads(out)
    assert len(data["files"]) == len(files) >= 15
    assert code == 1  # half_typed.py has a syntax error
    errors = [d for f in data["files"] for d in f["diagnostics"] if d["severity"] == "error"]
    assert [(Path(f["file"]).name, d["code"]) for f in data["files"] for d in f["diagnostics"]
            if d["severity"] == "error"] == [("half_typed.py", "MTMC001")]
    assert errors and "Traceback" not in err


def test_the_installed_entry_point_runs_over_the_corpus():
    files = sorted(str(p) for p in CORPUS.glob("*.py"))
    proc = subprocess.run([sys.executable, "-m", "mtmc_lsp", "analyze", *files], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.count(": MTMC001 error") == 1


# ---- bad input --------------------------------------------------------------------------------


def test_empty_file(tmp_path, capsys):
    path = tmp_path / "empty.py"
    path.write_text("")
    code, out, _ = run_cli(capsys, str(path))
    assert code == 0 and f"{path}: 0 kernels" in out


def test_non_triton_python(capsys):
    code, out, _ = run_cli(capsys, str(CORPUS / "not_triton.py"))
    assert code == 0 and "0 kernels" in out and "MTMC" not in out


def test_invalid_utf8_gives_a_clear_message(tmp_path, capsys):
    path = tmp_path / "latin1.py"
    path.write_bytes(b"import triton\n# caf\xe9\nx = 1\n")
    code, out, err = run_cli(capsys, str(path))
    assert code == 1
    assert f"{path}: error: not valid UTF-8 (byte 0xe9 at offset 19, line 2)" in out
    assert "Traceback" not in err


def test_missing_file_and_directory_give_clear_messages(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(tmp_path / "nope.py"), str(tmp_path))
    assert code == 1
    assert f"{tmp_path / 'nope.py'}: error: no such file" in out
    assert f"{tmp_path}: error: is a directory" in out


def test_unknown_target_is_an_argument_error(tmp_path, capsys):
    path = tmp_path / "k.py"
    path.write_text(PLANTED)
    code, _, err = run_cli(capsys, str(path), "--target", "gtx480")
    assert code == 2 and "unknown GPU" in err


def test_half_typed_file_reports_the_syntax_error(capsys):
    code, out, _ = run_cli(capsys, str(CORPUS / "half_typed.py"))
    assert code == 1
    assert "half_typed.py:9:1: MTMC001 error syntax error" in out


def test_null_bytes_and_deep_nesting_do_not_crash(tmp_path, capsys):
    nulls = tmp_path / "nulls.py"
    nulls.write_bytes(b"x = 1\n\x00\x00\n")
    deep = tmp_path / "deep.py"
    deep.write_text("x = " + "(" * 3000 + ")" * 3000 + "\n")
    code, out, err = run_cli(capsys, str(nulls), str(deep))
    assert code == 1 and out.count("MTMC001 error") == 2 and "Traceback" not in err


def test_broken_pipe_is_quiet():
    proc = subprocess.run(
        f"{sys.executable} -m mtmc_lsp analyze --json {' '.join(str(p) for p in sorted(CORPUS.glob('*.py')))} | head -c 10",
        shell=True, capture_output=True, text=True, timeout=120,
    )
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.slow
def test_five_megabyte_generated_file_finishes(tmp_path, capsys):
    path = tmp_path / "generated.py"
    rows = "".join(f"    ({i}, {i * 3}, {i * 7}, 0x{i:08x}),\n" for i in range(160_000))
    path.write_text(f'"""Generated lookup table."""\nTABLE = [\n{rows}]\n')
    assert path.stat().st_size > 5_000_000
    start = time.monotonic()
    code, out, err = run_cli(capsys, str(path))
    assert time.monotonic() - start < 90
    assert code == 0 and "0 kernels" in out and "Traceback" not in err


@pytest.mark.slow
def test_compile_flag_adds_compile_diagnostics(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MTMC_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "small.py"
    path.write_text((CORPUS / "vector_add.py").read_text())
    code, out, _ = run_cli(capsys, str(path), "--compile", "--json", "--target", "h100")
    data = json.loads(out)
    (result,) = data["files"]
    (report,) = result["compile"]
    assert report["status"] == "ok" and report["registers"] > 0 and not report["cached"]
    assert [d["code"] for d in result["diagnostics"]] == ["MTMC200"]
    assert code == 0
