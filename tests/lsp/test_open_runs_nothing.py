"""Opening a file never runs it: not without trust information, not with a malformed or late answer."""

from __future__ import annotations

import asyncio

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig

from .conftest import TEST_SETTINGS
from .editor import SERVER_COMMAND, CONFIG, EditorClient, initialize_params, make_editor_client

# Compile diagnostics on, trust left to each test: only trust (and static safety) may stop the compile.
COMPILING = {key: value for key, value in TEST_SETTINGS.items() if key != "trusted"} | {"compileDiagnostics": True}


def planted_file(marker) -> str:
    """The issue's file: a module-level constexpr whose value creates ``marker`` when evaluated."""
    return (
        "import triton\nimport triton.language as tl\n\n"
        f'SCALE = tl.constexpr((open({str(marker)!r}, "w").close(), 2)[1])\n\n\n'
        "@triton.jit\ndef scale_kernel(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    x = tl.load(x_ptr + offsets, mask=offsets < n)\n"
        "    tl.store(x_ptr + offsets, x * SCALE, mask=offsets < n)\n\n\n"
        "def launch(x):\n    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)\n"
    )


async def _open_and_wait(client: EditorClient, tmp_path, seconds: float = 4.0) -> tuple[str, list]:
    marker = tmp_path / "pwned"
    uri = (tmp_path / "planted.py").as_uri()
    client.open(uri, planted_file(marker))
    await client.diagnostics_for(uri, version=1)
    await asyncio.sleep(seconds)  # a compile (1-6 s) would have run by now
    assert not marker.exists(), "opening the file ran its module-level code"
    return uri, [d for p in client.published if p.uri == uri for d in p.diagnostics]


@pytest_lsp.fixture(config=CONFIG)
async def neovim_without_trust(lsp_client: EditorClient, tmp_path):
    """The README's Neovim set-up: settings, but nothing about trust."""
    lsp_client.set_configuration({"mtmc": dict(COMPILING)})
    await lsp_client.initialize_session(initialize_params("neovim", tmp_path))
    yield
    await lsp_client.shutdown_session()


async def test_no_trust_information_runs_nothing(neovim_without_trust: EditorClient, tmp_path):
    client = neovim_without_trust
    _uri, diagnostics = await _open_and_wait(client, tmp_path)
    assert all(s["queue"] == 0 for s in client.statuses), client.statuses  # no compile job was even started
    assert not any(str(d.code).startswith("MTMC2") for d in diagnostics)
    assert any("not trusted" in m.message and "mtmc.trusted" in m.message for m in client.log_messages)


@pytest_lsp.fixture(config=CONFIG)
async def string_false(lsp_client: EditorClient, tmp_path):
    """``"trusted": "false"`` as a string, at initialize and in the section: ignored, so untrusted."""
    lsp_client.set_configuration({"mtmc": {**COMPILING, "trusted": "false"}})
    params = initialize_params("visual-studio-code", tmp_path)
    params.initialization_options = {"trusted": "false", "mtmc": {**COMPILING, "trusted": "true"}}
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


async def test_string_trust_values_count_as_untrusted(string_false: EditorClient, tmp_path):
    client = string_false
    await _open_and_wait(client, tmp_path, seconds=3.0)
    assert all(s["queue"] == 0 for s in client.statuses), client.statuses
    warnings = [m.message for m in client.log_messages if m.type == types.MessageType.Warning]
    assert any("ignored trusted='false'" in w for w in warnings), warnings


async def _late_configuration(client: EditorClient, params: types.ConfigurationParams):
    await asyncio.sleep(3.0)  # after the server's 2-second settings wait
    return [{**COMPILING, "trusted": False} for _ in params.items]


def make_late_client() -> EditorClient:
    """A client that answers workspace/configuration after the server stopped waiting for it."""
    return make_editor_client({types.WORKSPACE_CONFIGURATION: _late_configuration})


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER_COMMAND, client_factory=make_late_client))
async def late_answer(lsp_client: EditorClient, tmp_path):
    params = initialize_params("visual-studio-code", tmp_path)
    params.initialization_options = {"mtmc": dict(COMPILING)}  # nothing about trust until the late answer
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


async def test_a_late_configuration_answer_runs_nothing_meanwhile(late_answer: EditorClient, tmp_path):
    await _open_and_wait(late_answer, tmp_path, seconds=5.0)
    assert all(s["queue"] == 0 for s in late_answer.statuses), late_answer.statuses


@pytest_lsp.fixture(config=CONFIG)
async def trusted_neovim(lsp_client: EditorClient, tmp_path):
    lsp_client.set_configuration({"mtmc": {**COMPILING, "trusted": True}})
    await lsp_client.initialize_session(initialize_params("neovim", tmp_path))
    yield
    await lsp_client.shutdown_session()


async def test_trusted_compiles_but_never_evaluates_module_code(trusted_neovim: EditorClient, tmp_path):
    """Trust lets Triton compile the kernel; the module-level value is still only data or unknown."""
    client = trusted_neovim
    uri = (tmp_path / "planted.py").as_uri()
    client.open(uri, planted_file(tmp_path / "pwned"))
    diagnostics = await client.diagnostics_for(
        uri, version=1, timeout=90, predicate=lambda ds: any(d.code == "MTMC204" for d in ds))
    hint = next(d for d in diagnostics if d.code == "MTMC204")
    assert "open()" in hint.message and "never run" in hint.message
    assert not (tmp_path / "pwned").exists()
