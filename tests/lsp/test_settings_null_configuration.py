"""workspace/configuration answering null (or leaving keys out) keeps the initializationOptions' settings (issue 33)."""

from __future__ import annotations

import ast

import pytest
import pytest_lsp

from .editor import CONFIG, EXAMPLES, EditorClient, initialize_params

BIG_TILES = ((EXAMPLES / "matmul.py").read_text().replace("BLOCK_M = 32", "BLOCK_M = 128")
             .replace("BLOCK_N = 32", "BLOCK_N = 128").replace("BLOCK_K = 32", "BLOCK_K = 64")
             .replace("num_stages=1", "num_stages=4"))
OPTIONS = {"targetGpu": "v100", "diagnosticsDebounceMs": 0, "compileDiagnostics": False, "policy": "heuristic",
           "verification": {"seeds": 2}}


@pytest_lsp.fixture(config=CONFIG, params=["null", "partial"])
async def client(request, lsp_client: EditorClient, tmp_path):
    """A client with workspace/configuration whose answer is null, or names only some keys."""
    if request.param == "partial":
        lsp_client.set_configuration({"mtmc": {"policy": "heuristic", "verification": {"runTimeoutS": 90}}})
    params = initialize_params("neovim", tmp_path)
    params.initialization_options = {"mtmc": dict(OPTIONS)}
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


def _last_settings(client: EditorClient) -> dict:
    logged = [m.message for m in client.log_messages if m.message.startswith("settings: ")]
    assert logged, "the server did not log its settings"
    return ast.literal_eval(logged[-1][len("settings: "):])


async def test_the_initialization_options_stay_when_the_configuration_answer_leaves_them_out(client: EditorClient,
                                                                                             tmp_path):
    uri = (tmp_path / "big.py").as_uri()
    client.open(uri, BIG_TILES)
    diagnostics = await client.diagnostics_for(uri, version=1)
    assert client.configuration_requests >= 1
    settings = _last_settings(client)
    assert settings["diagnosticsDebounceMs"] == 0 and settings["targetGpu"] == "v100"
    assert settings["verification"]["seeds"] == 2
    assert "MTMC104" in [d.code for d in diagnostics]  # 128 KiB of shared memory > the V100's 96 KiB
    if client.configuration_requests and client.get_configuration(section="mtmc"):
        assert settings["verification"]["runTimeoutS"] == 90  # what the answer does say is taken


@pytest.mark.parametrize("answer, expected", [
    (None, 0), ({}, 0), ({"diagnosticsDebounceMs": None}, 0), ({"diagnosticsDebounceMs": 50}, 50),
    ({"diagnostics_debounce_ms": 70}, 70),
])
def test_overlay_keeps_what_the_answer_leaves_out(answer, expected):
    from mtmc_lsp.server.settings_sync import overlay
    from mtmc_lsp.settings import Settings

    merged = overlay({"diagnosticsDebounceMs": 0, "verification": {"seeds": 2}}, answer or {})
    settings = Settings.from_client(merged)
    assert settings.diagnostics_debounce_ms == expected and settings.verification.seeds == 2
