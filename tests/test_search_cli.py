"""`mtmc optimize` end to end on the CPU: real actions, the embedded policy, interpreter verification."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"


def mtmc(*args, cwd=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "mtmc_lsp", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("example,kernel", [
    ("matmul", "matmul_kernel"), ("softmax", "softmax_kernel"), ("gelu_bias", "gelu_kernel"),
])
def test_optimize_runs_end_to_end_on_cpu(tmp_path, example, kernel):
    work = tmp_path / f"{example}.py"
    shutil.copyfile(EXAMPLES / f"{example}.py", work)
    original = work.read_text()
    proc = mtmc("optimize", str(work), "--kernel", kernel, "--steps", "2", "--seeds", "2", "--json", "--write",
                "--record", "--workspace", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["kernel"] == kernel and result["target"] == "h100"
    assert result["steps"], f"no step kept: {[a['reason'] for a in result['attempts']]}"
    assert result["speedMeasured"] is False
    assert any("speed unavailable" in note for note in result["notes"])
    assert "untrained" in result["policy"]
    for i, step in enumerate(result["steps"], start=1):
        assert step["status"] == "kept" and step["correct"] is True and step["compiled"] is True
        assert step["speedup"] is None and step["report"]["mode"] == "interpreter"
        assert f"(step {i})" in step["diff"] and step["policy"]["policy"] == "llama"
    assert work.read_text() == result["finalText"] != original
    (trajectory,) = (tmp_path / ".mtmc" / "trajectories").glob("*.jsonl")
    lines = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert lines[0]["type"] == "begin" and lines[-1]["type"] == "end"
    assert "policy: embedded model" in proc.stderr  # progress goes to stderr with --json


def test_optimize_reports_bad_input(tmp_path):
    missing = mtmc("optimize", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "nope.py" in missing.stderr
    proc = mtmc("optimize", str(EXAMPLES / "matmul.py"), "--kernel", "no_such_kernel")
    assert proc.returncode == 1 and "matmul_kernel" in proc.stderr
    proc = mtmc("optimize", str(EXAMPLES / "matmul.py"), "--target", "tpu9000")
    assert proc.returncode == 2 and "unknown GPU" in proc.stderr
