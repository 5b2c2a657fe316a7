"""`mtmc demo`: the README's main job finishes on the CPU and exits 0."""

import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_demo_runs_the_bundled_examples_through_the_pipeline(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mtmc_lsp", "demo", "--out", str(tmp_path), "--steps", "1"],
                          capture_output=True, text=True, timeout=1100)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "policy: embedded model SmolLM2-135M-Instruct.Q4_1.gguf" in out and "untrained" in out
    assert "diagnostics for H100" in out and "proposals for matmul_kernel" in out
    for name in ("matmul", "softmax", "gelu_bias"):
        assert (tmp_path / f"{name}.original.py").is_file()
        assert f"{name}.py" in out
    assert "=== step 1:" in out and "verified on CPU interpreter" in out
    assert "demo summary" in out
    optimized = (tmp_path / "matmul.py").read_text()
    assert optimized != (tmp_path / "matmul.original.py").read_text()
