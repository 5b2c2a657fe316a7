"""Hover, code lens, settings changes, target commands and mtmc/status, end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types

from .editor import EXAMPLES, EditorClient, code_actions, position_of

MATMUL = (EXAMPLES / "matmul.py").read_text()
# 128x128x64 fp16 tiles, 4 stages: 128 KiB of shared memory, over the V100's 96 KiB, under the H100's 227.
BIG_TILES = (MATMUL.replace("BLOCK_M = 32", "BLOCK_M = 128").replace("BLOCK_N = 32", "BLOCK_N = 128")
             .replace("BLOCK_K = 32", "BLOCK_K = 64").replace("num_stages=1", "num_stages=4"))


def _position(text: str, needle: str, delta: int = 0) -> types.Position:
    offset = text.index(needle) + delta
    line = text.count("\n", 0, offset)
    return types.Position(line=line, character=offset - (text.rfind("\n", 0, offset) + 1))


async def _hover(client, uri, position):
    return await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position))


async def _lenses(client, uri):
    return await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri)))


async def test_hover_on_kernel_shows_params_launches_and_resources(client: EditorClient, workspace):
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    hover = await _hover(client, uri, _position(MATMUL, "def matmul_kernel", 6))
    assert hover is not None
    text = hover.contents.value
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert "`matmul_kernel`" in text and "H100" in text
    assert "`a_ptr`" in text and "`BLOCK_K`" in text
    assert "**Launches** (1)" in text and "`matmul()`" in text and "num_stages=1" in text
    # 32x32 fp16 tiles of A and B, one stage: 4 KiB.
    assert "| 4 KiB |" in text
    start = hover.range.start
    assert MATMUL.splitlines()[start.line][start.character:hover.range.end.character] == "matmul_kernel"
    # Inside the body and outside kernels there is no kernel hover.
    assert await _hover(client, uri, _position(MATMUL, "acc += tl.dot")) is None
    assert await _hover(client, uri, _position(MATMUL, "def get_inputs", 5)) is None


async def test_hover_and_diagnostics_on_kernels_jitted_by_a_call(client: EditorClient, workspace):
    text = (Path(__file__).parents[1] / "corpus" / "realworld" / "jit_by_call.py").read_text()
    uri = (workspace / "jit_by_call.py").as_uri()
    client.open(uri, text)
    assert await client.diagnostics_for(uri, version=1) == []
    on_def = await _hover(client, uri, _position(text, "def _shift", 6))
    assert "`_shift`" in on_def.contents.value and "**Launches** (1)" in on_def.contents.value
    assert "`shift()`" in on_def.contents.value and "BLOCK=128" in on_def.contents.value
    on_call = await _hover(client, uri, _position(text, "shift_kernel = triton.jit", 20))
    assert on_call is not None and on_call.contents.value == on_def.contents.value
    square = await _hover(client, uri, _position(text, "(triton.jit(_square))", 3))
    assert "`_square`" in square.contents.value and "**Autotune**: 2 configs, key [n]" in square.contents.value
    assert await _hover(client, uri, _position(text, "tl.store(out_ptr + offs, x * x")) is None


async def test_hover_reports_arithmetic_intensity_when_shapes_are_known(client: EditorClient, workspace):
    text = MATMUL.replace("a, b, c, M, N, K,", "a, b, c, 4096, 4096, 4096,")
    uri = (workspace / "fixed.py").as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    hover = await _hover(client, uri, _position(text, "@triton.jit", 2))
    assert "Arithmetic intensity** (M=4096, N=4096, K=4096" in hover.contents.value
    assert "1365.3 FLOP/byte" in hover.contents.value


async def test_code_lens_summarises_each_kernel(client: EditorClient, workspace):
    text = (EXAMPLES / "gelu_bias.py").read_text() + "\n\n" + BIG_TILES.split("def matmul(")[0].split("import triton.language as tl")[1]
    uri = (workspace / "two.py").as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    lenses = await _lenses(client, uri)
    titles = [l.command.title for l in lenses]
    assert titles[0].startswith("scale_bias_kernel · 1 launch") and titles[0].endswith("H100")
    assert any(t.startswith("matmul_kernel · 0 launches") for t in titles)
    for lens in lenses:
        assert lens.command.command == "mtmc.optimizeKernel"
        assert lens.command.arguments[0] == uri
        line = text.splitlines()[lens.range.start.line]
        assert line.startswith("@triton.jit") or line.startswith("def ")


async def test_target_switch_in_settings_changes_shared_memory_finding(client: EditorClient, workspace):
    uri = (workspace / "big.py").as_uri()
    client.open(uri, BIG_TILES)
    first = await client.diagnostics_for(uri, version=1)
    assert "MTMC104" not in [d.code for d in first]
    count = len(client.published)
    client.set_configuration({"targetGpu": "v100", "diagnosticsDebounceMs": 20, "compileDiagnostics": False},
                             section="mtmc")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await client.diagnostics_for(uri, version=1, predicate=lambda d: any(x.code == "MTMC104" for x in d))
    smem = next(d for d in client.published[-1].diagnostics if d.code == "MTMC104")
    assert "131,072 bytes" in smem.message and "V100" in smem.message
    assert len(client.published) > count
    lenses = await _lenses(client, uri)
    assert lenses[0].command.title.endswith("V100") and "> 96 KiB limit" in lenses[0].command.title
    await asyncio.sleep(0.05)
    assert client.statuses[-1]["target"] == "v100"


async def test_the_target_setting_is_one_round_trip_and_one_refresh(client: EditorClient, workspace):
    """Select Target writes targetGpu; the server pulls once, refreshes once, and every consumer follows."""
    targets = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="mtmc.listTargets", arguments=[]))
    assert {"v100", "a100", "h100", "h200"} <= {t["key"] for t in targets}
    assert all(t["name"] and "SMs" in t["summary"] for t in targets)
    uri = (workspace / "big.py").as_uri()
    client.open(uri, BIG_TILES)
    await client.diagnostics_for(uri, version=1)
    await asyncio.sleep(0.3)
    published, pulls, lens_refreshes = len(client.published), client.configuration_requests, client.code_lens_refreshes

    client.set_configuration({"targetGpu": "v100", "diagnosticsDebounceMs": 20, "compileDiagnostics": False,
                              "policy": "heuristic", "trusted": True}, section="mtmc")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await client.diagnostics_for(uri, version=1, predicate=lambda d: any(x.code == "MTMC104" for x in d))
    await asyncio.sleep(0.5)  # anything else the change triggers would arrive by now
    assert client.configuration_requests - pulls == 1
    assert len([p for p in client.published[published:] if p.uri == uri]) == 1
    assert client.code_lens_refreshes - lens_refreshes <= 1  # once, where the client supports refresh
    assert client.statuses[-1]["target"] == "v100" and set(client.statuses[-1]) == {"target", "model", "queue"}
    check = next(d for d in client.published[-1].diagnostics if d.code == "MTMC104")
    assert "V100" in check.message
    actions = await code_actions(client, uri, position_of(BIG_TILES, "def matmul_kernel", 5))
    tiling = [a for a in actions if a.data and a.data["candidate"]["action"] == "tiling"]
    assert tiling and all("V100" in a.title for a in tiling)  # the tile choice is for the new target
    verified = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="mtmc.verifyKernel", arguments=[uri, "matmul_kernel"]))
    assert verified["target"] == "v100"


async def test_status_notification_after_initialized(client: EditorClient, workspace):
    for _ in range(100):
        if client.statuses:
            break
        await asyncio.sleep(0.02)
    status = client.statuses[-1]
    assert status["target"] == "h100" and status["queue"] == 0
    assert status["model"] in ("not loaded", "loading", "ready", "off")
    assert any("target GPU: H100" in m.message for m in client.log_messages)
