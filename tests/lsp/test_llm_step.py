"""``mtmc.llmStep``: the LLM coder's step in the editor, against a real local OpenAI-compatible endpoint.

A good diff comes back as a versioned ``workspace/applyEdit`` and is recorded and verified like a
rule step; a refused diff, a stale version, an untrusted workspace, a missing coder and a cancel
each leave the document alone with one clear reason.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types

from coder_fake_endpoint import SOFTMAX_RETILE, FakeChatEndpoint, fenced
from mtmc_lsp.server.features.llm_step import NO_CODER_MESSAGE

from .conftest import TEST_SETTINGS
from .editor import CLIENTS, CONFIG, EXAMPLES, EditorClient, execute_command, initialize_params, settled_steps

SOFTMAX = (EXAMPLES / "softmax.py").read_text()
GOAL = "retile with a smaller block and one warp"
RETILED = SOFTMAX.replace("BLOCK_SIZE = 128", "BLOCK_SIZE = 32").replace("num_warps=4", "num_warps=1")
# Changes the example's get_inputs(), outside the kernel and its launch code: the gate refuses it.
# The hunk is built from the example's own lines, so it keeps matching when the example's sizes change.
_HARNESS = SOFTMAX.split("\ndef get_inputs", 1)[1].splitlines()
_INPUTS = next(line for line in _HARNESS if "torch.randn(" in line)
OUTSIDE = fenced("@@\n" + f" def get_inputs{_HARNESS[0]}\n" + "".join(f" {line}\n" for line in _HARNESS[1:_HARNESS.index(_INPUTS)])
                 + f"-{_INPUTS}\n+{_INPUTS.replace('torch.randn(', 'torch.rand(')}\n")
# Verification off: a step's verification settles at once ("skipped") and runs no kernels.
QUIET = {**TEST_SETTINGS, "verification": {"enabled": False}}


def coder_settings(endpoint: FakeChatEndpoint, **extra) -> dict:
    return {**QUIET, "coderEndpoint": endpoint.url, "coderModel": "coder-7b", **extra}


@pytest.fixture
def endpoint():
    with FakeChatEndpoint() as fake:
        yield fake


async def _start(client: EditorClient, tmp_path, settings: dict, name: str = "visual-studio-code") -> str:
    client.set_configuration({"mtmc": settings})
    await client.initialize_session(initialize_params(name, tmp_path))
    uri = (tmp_path / "softmax.py").as_uri()
    client.open(uri, SOFTMAX)
    await client.diagnostics_for(uri, version=1)
    return uri


@pytest_lsp.fixture(config=CONFIG, params=CLIENTS)
async def coder_client(request, lsp_client: EditorClient, tmp_path, endpoint):
    lsp_client.editor_name = request.param
    await _start(lsp_client, tmp_path, coder_settings(endpoint), request.param)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def vscode_client(lsp_client: EditorClient, tmp_path, endpoint):
    await _start(lsp_client, tmp_path, coder_settings(endpoint))
    yield
    await lsp_client.shutdown_session()


def _uri(tmp_path) -> str:
    return (tmp_path / "softmax.py").as_uri()


def _warnings(client) -> list[str]:
    return [m.message for m in client.messages if m.type == types.MessageType.Warning]


async def _wait(predicate, timeout: float = 10.0) -> None:
    async def loop():
        while not predicate():
            await asyncio.sleep(0.02)
    await asyncio.wait_for(loop(), timeout)


async def _assert_untouched(client: EditorClient, uri: str) -> None:
    assert client.buffer_text(uri) == SOFTMAX and client.buffer_version(uri) == 1
    assert not client.applied_edits
    assert (await execute_command(client, "mtmc.stepHistory", uri))["steps"] == []


async def test_good_diff_is_applied_for_the_asked_version_and_recorded_like_a_rule_step(
        coder_client: EditorClient, tmp_path, endpoint):
    client, uri = coder_client, _uri(tmp_path)
    endpoint.answers = [SOFTMAX_RETILE]
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["applied"] is True and result["status"] == "applied" and result["recorded"] is True, result
    assert result["changedLines"] == 2 and result["coder"] == f"coder-7b at {endpoint.url}/chat/completions"

    # The model got the goal, the kernel and the file, from the endpoint and model the settings name.
    ((path, body, _),) = endpoint.requests
    assert path == "/v1/chat/completions" and body["model"] == "coder-7b"
    assert f"Goal: {GOAL}" in body["messages"][-1]["content"]
    assert "def softmax_kernel(" in body["messages"][-1]["content"]

    (params,) = client.applied_edits
    assert client.buffer_text(uri) == RETILED and client.buffer_version(uri) == 2
    if client.editor_name == "visual-studio-code":  # versioned, annotated for the Refactor Preview
        (change,) = params.edit.document_changes
        assert change.text_document.uri == uri and change.text_document.version == 1
        (annotation,) = params.edit.change_annotations.values()
        assert annotation.needs_confirmation and annotation.label == f"MTMC step 1: LLM: {GOAL} (softmax_kernel)"
    else:  # Neovim's capabilities: plain edits
        assert params.edit.document_changes is None and list(params.edit.changes) == [uri]

    # Recorded and "verified" (verification is off here) by the same path as a rule step.
    (step,) = await settled_steps(client, uri, 1)
    assert step["id"] == result["step"]["id"] and step["index"] == 1 and step["status"] == "applied"
    assert step["kernel"] == "softmax_kernel" and step["candidate"]["action"] == "llm"
    assert step["candidate"]["kind"] == "Tiling" and step["candidate"]["params"]["goal"] == GOAL
    assert step["textBefore"] == SOFTMAX and step["textAfter"] == RETILED
    assert step["verification"]["state"] == "skipped"
    assert uri in [c["uri"] for c in client.steps_changed]
    assert [m.message for m in client.log_messages if m.message.startswith("applied MTMC step")] == [
        f"applied MTMC step 1: LLM: {GOAL} (softmax_kernel)"]
    reports = [r for r in client.progress_reports.values() if r]
    assert [type(v).__name__ for v in reports[0]] == ["WorkDoneProgressBegin", "WorkDoneProgressEnd"]
    assert "LLM coder" in reports[0][0].title and reports[0][-1].message == "2 lines changed"
    assert not _warnings(client)

    # Rejecting it is the usual three-way revert.
    rejected = await execute_command(client, "mtmc.rejectStep", uri, step["id"])
    assert rejected["rejected"] is True and client.buffer_text(uri) == SOFTMAX


async def test_refused_diff_shows_the_gate_reason_and_leaves_the_document_alone(
        vscode_client: EditorClient, tmp_path, endpoint):
    client, uri = vscode_client, _uri(tmp_path)
    endpoint.answers = [OUTSIDE]
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["applied"] is False and result["status"] == "refused"
    assert "outside softmax_kernel's code" in result["reason"]
    assert _warnings(client) == [f"MTMC: no LLM step: {result['reason']}"]
    await _assert_untouched(client, uri)

    endpoint.answers = ["I would use a bigger block."]  # prose, no diff
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["status"] == "refused" and "holds no unified diff" in result["reason"]
    assert len(_warnings(client)) == 2
    await _assert_untouched(client, uri)


async def test_stale_version_is_refused_before_and_after_the_model_writes(vscode_client: EditorClient, tmp_path,
                                                                         endpoint):
    client, uri = vscode_client, _uri(tmp_path)
    version = client.edit(uri, (0, 0), (0, 0), "# edited\n")
    edited = client.buffer_text(uri)
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["status"] == "stale" and "version 1, now 2" in result["reason"]
    assert not endpoint.requests  # refused before asking the model
    assert _warnings(client)[-1].startswith("MTMC: no LLM step: the document changed")

    # The user types while the model writes: its answer no longer fits and is dropped.
    endpoint.hold.clear()
    endpoint.answers = [SOFTMAX_RETILE]
    task = asyncio.ensure_future(execute_command(client, "mtmc.llmStep", uri, version, "softmax_kernel", GOAL))
    await _wait(lambda: endpoint.requests)
    client.edit(uri, (0, 0), (0, 0), "# typed\n")
    await asyncio.sleep(0.2)  # the didChange reaches the server before the answer
    endpoint.hold.set()
    result = await asyncio.wait_for(task, 30)
    assert result["status"] == "stale" and "version 2, now 3" in result["reason"]
    assert client.buffer_text(uri) == "# typed\n" + edited and not client.applied_edits
    assert (await execute_command(client, "mtmc.stepHistory", uri))["steps"] == []


async def test_cancel_drops_the_answer(vscode_client: EditorClient, tmp_path, endpoint):
    client, uri = vscode_client, _uri(tmp_path)
    endpoint.hold.clear()
    endpoint.answers = [SOFTMAX_RETILE]
    task = asyncio.ensure_future(execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL))
    await _wait(lambda: endpoint.requests and any(client.progress_reports.values()))
    token = next(t for t, r in client.progress_reports.items() if r)
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(task, 10)  # answers at once, while the model still "writes"
    assert result["status"] == "cancelled" and result["applied"] is False
    endpoint.hold.set()
    await asyncio.to_thread(endpoint.answered.wait, 10)
    await asyncio.sleep(0.3)  # the late answer arrives and is dropped
    await _assert_untouched(client, uri)
    assert not _warnings(client)


@pytest_lsp.fixture(config=CONFIG)
async def untrusted_client(lsp_client: EditorClient, tmp_path, endpoint):
    await _start(lsp_client, tmp_path, coder_settings(endpoint, trusted=False))
    yield
    await lsp_client.shutdown_session()


async def test_untrusted_workspace_is_refused(untrusted_client: EditorClient, tmp_path, endpoint):
    client, uri = untrusted_client, _uri(tmp_path)
    endpoint.answers = [SOFTMAX_RETILE]
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["status"] == "untrusted" and result["applied"] is False
    assert "not trusted" in result["reason"]
    assert _warnings(client) == [f"MTMC: no LLM step: {result['reason']}"]
    assert not endpoint.requests and not client.progress_reports
    await _assert_untouched(client, uri)


@pytest_lsp.fixture(config=CONFIG)
async def unconfigured_client(lsp_client: EditorClient, tmp_path):
    await _start(lsp_client, tmp_path, dict(QUIET))
    yield
    await lsp_client.shutdown_session()


async def test_without_a_coder_the_message_names_the_settings_until_one_is_set(
        unconfigured_client: EditorClient, tmp_path, endpoint):
    client, uri = unconfigured_client, _uri(tmp_path)
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["status"] == "no_coder" and result["applied"] is False
    (warning,) = _warnings(client)
    assert "no LLM coder is configured" in warning
    assert "mtmc.coderEndpoint" in warning and "mtmc.coderModel" in warning and "mtmc.coderModelPath" in warning
    await _assert_untouched(client, uri)

    # Settings apply live: the next pull brings the endpoint.
    client.set_configuration({"mtmc": coder_settings(endpoint)})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    endpoint.answers = [SOFTMAX_RETILE]

    async def asked() -> dict:
        while True:
            result = await execute_command(client, "mtmc.llmStep", uri, client.buffer_version(uri), "softmax_kernel",
                                           GOAL)
            if result["status"] != "no_coder":
                return result
            await asyncio.sleep(0.05)

    result = await asyncio.wait_for(asked(), 10)
    assert result["applied"] is True and client.buffer_text(uri) == RETILED


async def test_a_missing_local_model_is_a_clear_refusal(unconfigured_client: EditorClient, tmp_path):
    client, uri = unconfigured_client, _uri(tmp_path)
    missing = tmp_path / "nope.gguf"
    client.set_configuration({"mtmc": {**QUIET, "coderModelPath": str(missing)}})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    # The setting is refused when it arrives (one warning naming it), and the step says no coder is set.
    await _wait(lambda: any("coderModelPath" in m.message and "is not a file" in m.message for m in client.messages))
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["status"] == "no_coder" and result["reason"] == NO_CODER_MESSAGE
    await _assert_untouched(client, uri)


@pytest_lsp.fixture(config=CONFIG)
async def verifying_client(lsp_client: EditorClient, tmp_path, endpoint):
    await _start(lsp_client, tmp_path, coder_settings(endpoint, verification={"seeds": 1, "runTimeoutS": 120}))
    yield
    await lsp_client.shutdown_session()


@pytest.mark.slow  # the step is verified in the Triton interpreter in a worker process
async def test_the_applied_step_is_verified_in_the_background(verifying_client: EditorClient, tmp_path, endpoint):
    client, uri = verifying_client, _uri(tmp_path)
    endpoint.answers = [SOFTMAX_RETILE]
    result = await execute_command(client, "mtmc.llmStep", uri, 1, "softmax_kernel", GOAL)
    assert result["applied"] is True, result
    (step,) = await settled_steps(client, uri, 1, timeout=240)
    assert step["verification"]["state"] == "passed" and step["verification"]["mode"] == "interpreter", step


def test_the_endpoint_wins_over_a_local_model_and_a_local_model_stays_loaded(tmp_path):
    from mtmc_lsp.optimizer.coder import EndpointChat, LlamaChat
    from mtmc_lsp.server.features.llm_step import make_chat
    from mtmc_lsp.settings import Settings

    assert make_chat(Settings()) is None
    assert make_chat(Settings(coder_model="coder-7b")) is None  # a model name alone names no server
    both = make_chat(Settings(coder_endpoint=" http://gpu:8000/v1 ", coder_model="coder-7b",
                              coder_model_path=str(tmp_path / "a.gguf")))
    assert isinstance(both, EndpointChat) and both.url == "http://gpu:8000/v1/chat/completions"
    assert both.model == "coder-7b"
    local = make_chat(Settings(coder_model_path=str(tmp_path / "a.gguf")))
    assert isinstance(local, LlamaChat) and make_chat(Settings(coder_model_path=str(tmp_path / "a.gguf"))) is local
    other = make_chat(Settings(coder_model_path=str(tmp_path / "b.gguf")))
    assert other is not local and make_chat(Settings(coder_model_path=str(tmp_path / "b.gguf"))) is other
