"""The LLM coder against a real local HTTP server that speaks /v1/chat/completions with scripted answers.

Fast: the request, every refusal of the gate (the file stays unchanged) and endpoint failures,
through ``LlmCoder`` and through ``mtmc apply --llm``. Slow: a good step and a wrong step go
through ``mtmc apply --llm --write`` and then ``mtmc verify`` in the Triton CPU interpreter.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from coder_fake_endpoint import SOFTMAX_RETILE, FakeChatEndpoint, fenced

from mtmc_lsp.cli import main
from mtmc_lsp.optimizer.coder import CoderError, EndpointChat, LlmCoder
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.history import StepHistory

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"
SOFTMAX = (EXAMPLES / "softmax.py").read_text()
GELU = (EXAMPLES / "gelu_bias.py").read_text()
H100 = get_profile("h100")


@pytest.fixture
def chat_server():
    with FakeChatEndpoint() as server:
        yield server


@pytest.fixture
def endpoint(chat_server):
    return chat_server.url


GELU_WRONG = fenced("""--- a/gelu_bias.py
+++ b/gelu_bias.py
@@ -24,3 +24,3 @@
     y = tl.load(y_ptr + offsets, mask=mask)
-    out = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
+    out = 0.5 * y * (1.0 + tl.erf(y * 0.7))
     tl.store(out_ptr + offsets, out, mask=mask)
""")


def test_request_holds_goal_target_numbered_source_and_rules(chat_server, endpoint):
    chat_server.answers = [(200, SOFTMAX_RETILE)]
    chat = EndpointChat(endpoint, model="coder-7b", api_key="sekrit")
    step = LlmCoder(chat).rewrite(SOFTMAX, "softmax_kernel", "retile with a smaller block and one warp", H100,
                                  "softmax.py")
    path, body, auth = chat_server.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sekrit"
    assert body["model"] == "coder-7b" and body["temperature"] == 0 and body["max_tokens"] == 1024
    user = body["messages"][-1]["content"]
    assert "Target GPU: H100 SXM (sm_90)" in user and "Goal: retile with a smaller block and one warp" in user
    assert " 9 | def softmax_kernel(out_ptr, in_ptr," in user
    assert "ONE unified diff of softmax.py only" in user and "at most 30 lines" in user
    assert "Edit only the kernel softmax_kernel (lines 8-29)" in user and "host function softmax() lines 32-37" in user
    # The step is what a rule action returns: an Edit plus a Candidate the history can record.
    assert step.edit.new_text == SOFTMAX.replace("BLOCK_SIZE = 128", "BLOCK_SIZE = 32").replace("num_warps=4", "num_warps=1")
    assert step.edit.changed_lines == 2
    assert step.candidate.action == "llm" and step.candidate.kernel == "softmax_kernel"
    assert step.candidate.kind == "Tiling" and step.candidate.params["coder"] == f"coder-7b at {endpoint}/chat/completions"


def too_many_lines() -> str:
    added = "".join(f"+    # note {i}\n" for i in range(31))
    return fenced(f"@@\n     row = tl.program_id(0)\n{added}     row_in = in_ptr + row * in_row_stride\n")


REFUSALS = {
    "no diff": ("softmax_kernel", "I would use a block of 1024 and 8 warps.", "the model's answer holds no unified diff"),
    "malformed": ("softmax_kernel", "@@\n     y = torch.empty_like(x)\n-    BLOCK_SIZE = 128\n+    BLOCK_SIZE = 64\n"
                  "and then\n@@\n-    return y\n+    return y\n", "the diff is malformed"),
    "context not found": ("softmax_kernel", fenced("@@\n     y = torch.zeros_like(x)\n-    BLOCK_SIZE = 128\n"
                                                   "+    BLOCK_SIZE = 64\n"), "hunk 1 does not apply"),
    "ambiguous": ("softmax_kernel", fenced("@@\n         cols = start + tl.arange(0, BLOCK_SIZE)\n"
                                           "-        x = tl.load(row_in + cols, mask=cols < n_cols, other=-float(\"inf\"))\n"
                                           "+        x = tl.load(row_in + cols, mask=cols < n_cols, other=float(\"-inf\"))\n"),
                  "hunk 1 is ambiguous: its old lines match at lines 16, 22, 27"),
    "too many lines": ("softmax_kernel", too_many_lines(), "the diff changes 31 lines; the limit is 30"),
    "deletes a kernel": ("gelu_kernel", fenced("@@\n-@triton.jit\n-def scale_bias_kernel(x_ptr, w_ptr, b_ptr, y_ptr, "
                                               "n_elements, BLOCK_SIZE: tl.constexpr):\n+def scale_bias_kernel(x_ptr, "
                                               "w_ptr, b_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n"),
                         "the patched file no longer defines kernel scale_bias_kernel"),
    "renames the kernel": ("gelu_kernel", fenced("@@\n @triton.jit\n-def gelu_kernel(y_ptr, out_ptr, n_elements, "
                                                 "BLOCK_SIZE: tl.constexpr):\n+def gelu_fast(y_ptr, out_ptr, n_elements, "
                                                 "BLOCK_SIZE: tl.constexpr):\n"),
                           "the patched file no longer defines kernel gelu_kernel"),
    "changes parameters": ("gelu_kernel", fenced("@@\n @triton.jit\n-def gelu_kernel(y_ptr, out_ptr, n_elements, "
                                                 "BLOCK_SIZE: tl.constexpr):\n+def gelu_kernel(y_ptr, out_ptr, n_elements, "
                                                 "BLOCK_SIZE):\n"),
                           "kernel gelu_kernel's parameters changed from (y_ptr, out_ptr, n_elements, BLOCK_SIZE: "
                           "constexpr) to (y_ptr, out_ptr, n_elements, BLOCK_SIZE)"),
    "syntax error": ("gelu_kernel", fenced("@@\n     y = tl.load(y_ptr + offsets, mask=mask)\n-    out = 0.5 * y * "
                                           "(1.0 + tl.erf(y * 0.7071067811865476))\n+    out = 0.5 * y * (1.0 + "
                                           "tl.erf(y * 0.7071067811865476)\n"),
                     "the patched file does not parse: line 25:"),
    "outside the kernel": ("gelu_kernel", fenced("@@\n     b = tl.load(b_ptr + offsets, mask=mask)\n-    tl.store(y_ptr "
                                                 "+ offsets, x * w + b, mask=mask)\n+    tl.store(y_ptr + offsets, "
                                                 "w * x + b, mask=mask)\n"),
                           "the diff changes line 16, outside gelu_kernel's code (kernel lines 19-26, host function "
                           "gelu_bias() lines 29-37)"),
    "two files": ("gelu_kernel", fenced("--- a/gelu_bias.py\n+++ b/gelu_bias.py\n@@\n-    BLOCK_SIZE = 128\n+    "
                                        "BLOCK_SIZE = 256\n--- a/other.py\n+++ b/other.py\n@@\n-a\n+b\n"),
                  "the diff changes 2 files"),
    "no change": ("gelu_kernel", fenced("@@\n-    BLOCK_SIZE = 128\n+    BLOCK_SIZE = 128\n"), "the diff changes nothing"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_each_bad_answer_is_refused_in_one_line_and_the_file_is_unchanged(chat_server, endpoint, tmp_path, capsys, case):
    kernel, answer, message = REFUSALS[case]
    source = SOFTMAX if kernel == "softmax_kernel" else GELU
    doc = tmp_path / ("softmax.py" if kernel == "softmax_kernel" else "gelu_bias.py")
    doc.write_text(source)
    chat_server.answers = [(200, answer)]
    with pytest.raises(CoderError) as info:
        LlmCoder(EndpointChat(endpoint)).rewrite(source, kernel, "make it faster", H100, doc.name)
    assert message in str(info.value) and "\n" not in str(info.value)
    chat_server.answers = [(200, answer)]
    rc = main(["apply", str(doc), "--kernel", kernel, "--llm", "make it faster", "--coder-endpoint", endpoint,
               "--write", "--workspace", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and f"mtmc apply: no LLM step: {message}" in err
    assert doc.read_text() == source and not (tmp_path / ".mtmc").exists()


def test_endpoint_failures_are_clear_errors(chat_server, endpoint, tmp_path, capsys):
    chat_server.answers = [(500, {"error": {"message": "CUDA out of memory\nTraceback..."}}),
                            (200, b"<html>gateway</html>"), (200, {"choices": []})]
    coder = LlmCoder(EndpointChat(endpoint, timeout_s=5))
    with pytest.raises(CoderError, match=r"answered HTTP 500 \(CUDA out of memory\)$"):
        coder.rewrite(GELU, "gelu_kernel", "retile", H100)
    with pytest.raises(CoderError, match="did not answer JSON"):
        coder.rewrite(GELU, "gelu_kernel", "retile", H100)
    with pytest.raises(CoderError, match=r"answered without choices\[0\]\.message\.content"):
        coder.rewrite(GELU, "gelu_kernel", "retile", H100)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    doc = tmp_path / "gelu_bias.py"
    doc.write_text(GELU)
    assert main(["apply", str(doc), "--kernel", "gelu_kernel", "--llm", "retile", "--coder-endpoint", closed,
                 "--write", "--workspace", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"the coder endpoint {closed}/chat/completions cannot be reached" in err and "Traceback" not in err
    assert doc.read_text() == GELU


def test_coder_refuses_bad_requests_before_asking(chat_server, endpoint):
    coder = LlmCoder(EndpointChat(endpoint))
    with pytest.raises(CoderError, match=r"no kernel named 'nope' in the file \(kernels: scale_bias_kernel, gelu_kernel\)"):
        coder.rewrite(GELU, "nope", "retile", H100)
    with pytest.raises(CoderError, match="the goal is empty"):
        coder.rewrite(GELU, "gelu_kernel", "  ", H100)
    with pytest.raises(CoderError, match="the file has a syntax error"):
        coder.rewrite(GELU + "\ndef broken(:\n", "gelu_kernel", "retile", H100)
    assert chat_server.requests == []


@pytest.mark.parametrize("argv, message", [
    (["--action", "tiling", "--coder-endpoint", "http://x/v1"], "--coder-endpoint only work with --llm GOAL"),
    (["--llm", "retile", "--coder-model", "m"], "--coder-model names the model an endpoint serves"),
    (["--llm", "retile", "--coder-endpoint", "http://x/v1", "--coder-model-path", "m.gguf"], "choose one coder model"),
    (["--llm", "retile", "--param", "BLOCK_SIZE=64"], "--param sets a rule action's parameters"),
    (["--llm", "retile", "--coder-model-path", "/nonexistent/coder.gguf"],
     "the coder model /nonexistent/coder.gguf does not exist"),
])
def test_cli_rejects_option_combinations(capsys, argv, message):
    assert main(["apply", str(EXAMPLES / "gelu_bias.py"), "--kernel", "gelu_kernel", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_needs_an_action_or_a_goal(capsys):
    with pytest.raises(SystemExit) as info:
        main(["apply", str(EXAMPLES / "gelu_bias.py"), "--kernel", "gelu_kernel"])
    assert info.value.code == 2 and "one of the arguments --action --llm is required" in capsys.readouterr().err


def test_cli_prints_the_diff_then_writes_and_records_a_step_that_rejects_cleanly(chat_server, endpoint, tmp_path, capsys):
    doc = tmp_path / "softmax.py"
    doc.write_text(SOFTMAX)
    chat_server.answers = [(200, SOFTMAX_RETILE), (200, SOFTMAX_RETILE)]
    argv = ["apply", str(doc), "--kernel", "softmax_kernel", "--llm", "retile with a smaller block",
            "--coder-endpoint", endpoint, "--coder-model", "coder-7b", "--workspace", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "-    BLOCK_SIZE = 128\n" in captured.out and "+    BLOCK_SIZE = 32\n" in captured.out
    assert "# LLM: retile with a smaller block (softmax_kernel): 2 lines changed" in captured.err
    assert doc.read_text() == SOFTMAX
    assert main(argv + ["--write"]) == 0
    assert "step 1" in capsys.readouterr().out
    assert "BLOCK_SIZE = 32" in doc.read_text()
    history = StepHistory(tmp_path, doc)
    (step,) = history.steps()
    assert step.candidate.action == "llm" and step.candidate.params["goal"] == "retile with a smaller block"
    assert step.text_before == SOFTMAX
    assert history.reject(step.id, doc.read_text()) == SOFTMAX  # the same 3-way revert as a rule step


@pytest.mark.slow
def test_good_and_wrong_llm_steps_go_through_mtmc_verify(chat_server, endpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the interpreter, whatever the machine has
    # The verifier's folders in this test's own temporary folder: CI once saw one vanish from a shared scratch
    # folder (/tmp/mtmc-lsp-<pid>-*) that a server elsewhere in the run cleaned up.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    for name, kernel, answer, expected in (("softmax", "softmax_kernel", SOFTMAX_RETILE, "verified"),
                                           ("gelu_bias", "gelu_kernel", GELU_WRONG, "incorrect")):
        before = tmp_path / f"{name}.before.py"
        shutil.copy(EXAMPLES / f"{name}.py", before)
        doc = tmp_path / f"{name}.py"
        shutil.copy(before, doc)
        chat_server.answers = [(200, answer)]
        assert main(["apply", str(doc), "--kernel", kernel, "--llm", "retile", "--coder-endpoint", endpoint,
                     "--write", "--workspace", str(tmp_path)]) == 0
        assert doc.read_text() != before.read_text()
        capsys.readouterr()
        rc = main(["verify", str(doc), "--against", str(before), "--json", "--seeds", "2"])
        report = json.loads(capsys.readouterr().out)
        assert report["status"] == expected, report["summary"]
        assert rc == (0 if expected == "verified" else 1)
        if expected == "incorrect":
            assert report["mismatch"]["kind"] == "values" and report["mismatch"]["against"] in ("reference", "previous")


@pytest.mark.parametrize("goal, kind", [
    ("fuse the row-statistics kernel into its consumer", "Fusion"),
    ("tile the column reduction in 2-D", "Tiling"),
    ("retile with a smaller block and one warp", "Tiling"),
    ("use 8 warps, then a bigger BLOCK_SIZE", "Warps"),
    ("use tl.dot for the product", "TensorCore"),
    ("make it faster", "LLM"),
])
def test_the_step_kind_is_the_kind_the_goal_names_first(goal, kind):
    from mtmc_lsp.optimizer.coder import goal_kind

    assert goal_kind(goal) == kind
