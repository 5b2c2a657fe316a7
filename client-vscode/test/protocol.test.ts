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
const EXAMPLE = resolve(REPO, "mtmc_lsp", "examples", "matmul.py");

describe.skipIf(!server.python)("protocol against the real server (mtmc serve)", () => {
  let session: LspSession;
  let workspace: string;
  let uri: string;

  let PLANTED: string;

  beforeAll(async () => {
    const matmul = readFileSync(EXAMPLE, "utf8");
    PLANTED = matmul.replace("num_warps=4", "num_warps=6");
    expect(PLANTED).not.toBe(matmul);
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

  it("offers a quick fix for the diagnostic; applying it clears the diagnostic", async () => {
    expect(session.serverCapabilities.codeActionProvider, "the server no longer advertises codeActionProvider").toBeTruthy();
    expect(planted).toBeDefined();
    const actions: any[] = await session.connection.sendRequest("textDocument/codeAction", {
      textDocument: { uri },
      range: planted.range,
      context: { diagnostics: [planted], triggerKind: 1 },
    });
    const fix = actions.find((a) => a.kind === "quickfix" && a.diagnostics?.some((d: Diagnostic) => d.code === "MTMC105"));
    expect(fix, JSON.stringify(actions.map((a) => a.title))).toBeDefined();
    expect(fix.edit.documentChanges[0].textDocument.version).toBe(session.version(uri));
    expect(session.applyWorkspaceEdit(fix.edit)).toBe(true);
    // As VS Code does: the action's command runs after its edit (the server may record the fix as a step).
    if (fix.command) await session.executeCommand(fix.command.command, fix.command.arguments ?? []);
    expect(session.text(uri)).toMatch(/num_warps=(4|8)/);
    const version = session.version(uri);
    await session.waitFor(
      "diagnostics without MTMC105",
      () => session.diagnostics.find((p) => p.uri === uri && p.version === version && !p.diagnostics.some((d) => d.code === "MTMC105")),
      60_000,
    );
  }, 90_000);

  it("offers an optimization step, resolves its edit, applies it for review, and verifies the step", async () => {
    expect(session.serverCapabilities.codeActionProvider, "the server no longer advertises codeActionProvider").toBeTruthy();
    expect(session.serverCapabilities.codeActionProvider.resolveProvider).toBe(true);
    // The cursor inside the kernel body: the steps for that kernel.
    const line = session.text(uri).split("\n").findIndex((l) => l.includes("acc += tl.dot(a, b)"));
    expect(line).toBeGreaterThan(0);
    const actions: any[] = await session.connection.sendRequest("textDocument/codeAction", {
      textDocument: { uri },
      range: { start: { line, character: 8 }, end: { line, character: 8 } },
      context: { diagnostics: [], triggerKind: 1 },
    });
    const steps = actions.filter((a) => a.kind?.startsWith("refactor"));
    expect(steps.length, JSON.stringify(actions.map((a) => a.title))).toBeGreaterThan(0);
    // Listing is cheap: the edit is computed on resolve.
    expect(steps[0].edit).toBeUndefined();
    const action: any = await session.connection.sendRequest("codeAction/resolve", steps[0]);
    expect(action.edit, JSON.stringify(action)).toBeTruthy();

    const versionBefore = session.version(uri);
    const textBefore = session.text(uri);
    // Versioned, so a stale step fails instead of corrupting the document; annotated with
    // needsConfirmation, so VS Code opens its Refactor Preview.
    const change = action.edit.documentChanges[0];
    expect(change.textDocument.version).toBe(versionBefore);
    const annotations = Object.values(action.edit.changeAnnotations ?? {}) as any[];
    expect(annotations.some((a) => a.needsConfirmation === true)).toBe(true);
    expect(change.edits.every((e: any) => e.annotationId && action.edit.changeAnnotations[e.annotationId])).toBe(true);
    expect(session.applyWorkspaceEdit(action.edit)).toBe(true);
    expect(session.text(uri)).not.toBe(textBefore);
    // VS Code runs the action's command after applying its edit: the server records the step.
    if (action.command) await session.executeCommand(action.command.command, action.command.arguments ?? []);

    const verified = await session.waitFor(
      "a verified step in mtmc.stepHistory",
      async () => {
        const history = parseStepHistory(await session.executeCommand("mtmc.stepHistory", [uri]));
        const step = history.at(-1);
        const state = step?.verification?.state;
        return step && state && !["pending", "running", "queued", "unknown"].includes(state) ? step : undefined;
      },
      240_000,
      2_000,
    );
    expect(session.stepsChanged).toContain(uri);
    expect(verified.title).toContain(steps[0].title.replace(/ \(changes numerics\)$/, ""));
    expect(verified.textBefore).toBe(textBefore);
    expect(verified.textAfter).toBe(session.text(uri));
    expect(verified.verification!.state, JSON.stringify(verified.verification)).toBe("passed");
    // No GPU here: correctness comes from the interpreter and speed is never estimated.
    expect(verified.verification!.mode).toBe("interpreter");
    expect(verified.verification!.speedup).toBeUndefined();
  }, 300_000);
});
