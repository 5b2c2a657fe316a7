// The real Python server, driven from Node the way the extension's language client drives it:
// open -> diagnostics -> code action -> resolve -> apply -> verification result.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseStepHistory, parseTargets } from "../src/protocol";
import { Diagnostic, findServerPython, LspSession, REPO } from "./lspSession";

const server = findServerPython();
if (!server.python) console.warn(`[protocol test] skipped: ${server.reason}`);

const SETTINGS = {
  targetGpu: "h100",
  policy: "heuristic",
  diagnosticsDebounceMs: 20,
  compileDiagnostics: false,
  verification: { enabled: true, seeds: 1, compileTimeoutS: 120, runTimeoutS: 120 },
  trusted: true,
};

// The bundled naive matmul (it has a harness: get_inputs and reference) with a planted launch problem.
const MATMUL = readFileSync(resolve(REPO, "mtmc_lsp", "examples", "matmul.py"), "utf8");
const PLANTED = MATMUL.replace("num_warps=4", "num_warps=6");

describe.skipIf(!server.python)("protocol against the real server (mtmc serve)", () => {
  let session: LspSession;
  let workspace: string;
  let uri: string;

  beforeAll(async () => {
    expect(PLANTED).not.toBe(MATMUL);
    workspace = mkdtempSync(join(tmpdir(), "mtmc-protocol-"));
    uri = `file://${workspace}/matmul.py`;
    session = await LspSession.start(server.python!, workspace, SETTINGS);
  }, 120_000);

  afterAll(async () => {
    await session?.stop();
    if (workspace) rmSync(workspace, { recursive: true, force: true });
  });

  let planted: Diagnostic;

  it("publishes diagnostics for the opened version", async () => {
    session.open(uri, PLANTED);
    const published = await session.waitFor(
      "diagnostics for version 1",
      () => session.diagnostics.find((p) => p.uri === uri && (p.version === undefined || p.version === 1) && p.diagnostics.length > 0),
      60_000,
    );
    planted = published.diagnostics.find((d) => d.code === "MTMC105")!;
    expect(planted, JSON.stringify(published.diagnostics)).toBeDefined();
    expect(planted.source).toBe("mtmc");
    expect(PLANTED.split("\n")[planted.range.start.line]).toContain("num_warps=6");
  }, 90_000);

  it("lists the targets the Select Target GPU pick offers", async () => {
    const targets = parseTargets(await session.executeCommand("mtmc.listTargets", []));
    expect(targets.map((t) => t.key.toLowerCase())).toContain("h100");
    expect(targets.every((t) => t.name && t.summary)).toBe(true);
  });

  it("offers a code action, resolves it, applies it as a reviewable edit, and verifies the step", async (ctx) => {
    if (!session.serverCapabilities.codeActionProvider) ctx.skip("the server does not offer code actions yet (no codeActionProvider)");
    expect(planted).toBeDefined();
    const actions: any[] = await session.connection.sendRequest("textDocument/codeAction", {
      textDocument: { uri },
      range: planted.range,
      context: { diagnostics: [planted], triggerKind: 1 },
    });
    expect(actions.length).toBeGreaterThan(0);
    // The quick fix for the planted diagnostic, else the first optimization step.
    let action = actions.find((a) => a.diagnostics?.some((d: Diagnostic) => d.code === "MTMC105")) ?? actions[0];
    expect(action.title).toBeTruthy();
    if (!action.edit && session.serverCapabilities.codeActionProvider.resolveProvider) {
      action = await session.connection.sendRequest("codeAction/resolve", action);
    }
    expect(action.edit || action.command, JSON.stringify(action)).toBeTruthy();

    const versionBefore = session.version(uri);
    const textBefore = session.text(uri);
    if (action.edit) {
      // VS Code shows annotated edits (needsConfirmation) in the Refactor Preview; versioned changes
      // make a stale step fail instead of corrupting the document.
      const change = action.edit.documentChanges?.[0];
      if (change) expect(change.textDocument.version).toBe(versionBefore);
      expect(session.applyWorkspaceEdit(action.edit)).toBe(true);
    }
    if (action.command) {
      await session.executeCommand(action.command.command, action.command.arguments ?? []);
    }
    await session.waitFor("the edit to be applied", () => (session.text(uri) !== textBefore ? true : undefined), 60_000);
    const edits = session.appliedEdits.map((p) => p.edit).concat(action.edit ? [action.edit] : []);
    const annotations = edits.flatMap((e) => Object.values(e.changeAnnotations ?? {})) as any[];
    expect(annotations.some((a) => a.needsConfirmation === true), "VS Code gets a Refactor Preview (needsConfirmation)").toBe(true);

    // The step is recorded and verified in the background; the server says so with mtmc/stepsChanged.
    const verified = await session.waitFor(
      "a verified step in mtmc.stepHistory",
      async () => {
        const steps = parseStepHistory(await session.executeCommand("mtmc.stepHistory", [uri]));
        const step = steps.at(-1);
        const state = step?.verification?.state;
        return step && state && !["pending", "running", "queued", "unknown"].includes(state) ? step : undefined;
      },
      240_000,
      2_000,
    );
    expect(session.stepsChanged).toContain(uri);
    expect(verified.textBefore).toBe(textBefore);
    expect(verified.textAfter).toBe(session.text(uri));
    expect(verified.verification!.state).toBe("passed");
    // No GPU here: correctness comes from the interpreter and speed is never estimated.
    expect(verified.verification!.mode).toBe("interpreter");
    expect(verified.verification!.speedup).toBeUndefined();
  }, 300_000);
});
