import { beforeEach, describe, expect, it } from "vitest";
import { applyEdits, PENDING_TTL_MS, StepRecorder } from "../src/stepRecorder";
import { activateExtension, flush, lastClient, resetAll, TRITON_PATH, TRITON_SOURCE, TRITON_URI } from "./helpers";
import { makeDocument, mock } from "./mocks/vscode";

const range = (line: number, start: number, end: number) => ({ start: { line, character: start }, end: { line, character: end } });

/** A code action as vscode-languageclient hands it to VS Code: a WorkspaceEdit and the server's command. */
function stepAction(token: string, edits: { range: ReturnType<typeof range>; newText: string }[], uri = TRITON_URI) {
  return {
    title: "Use num_warps=4 (a power of 2)",
    kind: { value: "quickfix" },
    edit: { get: (u: { toString(): string }) => (u.toString() === uri ? edits : []) },
    command: { title: "Record and verify the fix", command: "mtmc.stepApplied", arguments: [uri, token] },
  } as any;
}

function change(text: string, path = TRITON_PATH) {
  mock.events.changeDocument.fire({ document: makeDocument(path, text) });
}

beforeEach(resetAll);

describe("applyEdits", () => {
  it("applies several edits against the original positions", () => {
    const text = "a = 1\nb = 2\nc = 3\n";
    expect(applyEdits(text, [{ range: range(0, 4, 5), newText: "10" }, { range: range(2, 0, 1), newText: "cc" }])).toBe("a = 10\nb = 2\ncc = 3\n");
  });

  it("handles CRLF lines and clamps to the line end", () => {
    expect(applyEdits("x = 1\r\ny = 2\r\n", [{ range: range(1, 4, 99), newText: "3" }])).toBe("x = 1\r\ny = 3\r\n");
  });
});

describe("StepRecorder", () => {
  let notified: [string, string][];
  let recorder: StepRecorder;
  let now: number;

  beforeEach(() => {
    mock.documents.push(makeDocument(TRITON_PATH, TRITON_SOURCE));
    notified = [];
    now = 0;
    recorder = new StepRecorder(async (uri, token) => notified.push([uri, token]), () => now);
  });

  it("takes the command off the action and sends it once the edit's text is in the document", () => {
    const line = TRITON_SOURCE.split("\n").findIndex((l) => l.includes("pid = tl.program_id(0)"));
    const action = recorder.take(stepAction("t1", [{ range: range(line, 4, 7), newText: "program" }]));
    expect(action.command).toBeUndefined();
    expect(recorder.pendingCount).toBe(1);
    change(TRITON_SOURCE + "# typing elsewhere\n");
    expect(notified).toEqual([]);
    change(TRITON_SOURCE.replace("    pid = tl.program_id(0)", "    program = tl.program_id(0)"));
    expect(notified).toEqual([[TRITON_URI, "t1"]]);
    expect(recorder.pendingCount).toBe(0);
  });

  it("never records a discarded or partly applied edit", () => {
    const lines = TRITON_SOURCE.split("\n");
    const a = lines.findIndex((l) => l.includes("pid = tl.program_id(0)"));
    recorder.take(stepAction("t2", [{ range: range(a, 4, 7), newText: "p" }, { range: range(a + 1, 4, 8), newText: "o" }]));
    change(TRITON_SOURCE.replace("    pid = tl.program_id(0)", "    p = tl.program_id(0)")); // only the first hunk
    expect(notified).toEqual([]);
  });

  it("leaves actions alone that are not steps or have no edit yet (they are taken after resolve)", () => {
    const unresolved = { ...stepAction("t3", []), edit: undefined };
    expect(recorder.take(unresolved).command.command).toBe("mtmc.stepApplied");
    const other = { title: "x", command: { command: "mtmc.optimizeKernel", arguments: [TRITON_URI] }, edit: stepAction("t", []).edit };
    expect(recorder.take(other as any).command.command).toBe("mtmc.optimizeKernel");
    expect(recorder.pendingCount).toBe(0);
  });

  it("forgets steps after a while", () => {
    const line = TRITON_SOURCE.split("\n").findIndex((l) => l.includes("pid = tl.program_id(0)"));
    recorder.take(stepAction("old", [{ range: range(line, 4, 7), newText: "q" }]));
    now += PENDING_TTL_MS + 1;
    recorder.take(stepAction("new", [{ range: range(line, 4, 7), newText: "r" }]));
    expect(recorder.pendingCount).toBe(1);
  });
});

describe("in the extension", () => {
  it("records a code action's step through the server when its edit lands", async () => {
    await activateExtension();
    const middleware = lastClient().clientOptions.middleware;
    const line = TRITON_SOURCE.split("\n").findIndex((l) => l.includes("pid = tl.program_id(0)"));
    const listed = await middleware.provideCodeActions(mock.documents[0], range(line, 0, 0), {}, {}, async () => [
      { ...stepAction("quick", [{ range: range(line, 4, 7), newText: "pid_m" }]) },
      { title: "Apply tiling", command: { command: "mtmc.stepApplied", arguments: [TRITON_URI, "step"] } },
    ]);
    expect(listed[0].command).toBeUndefined();
    expect(listed[1].command.command).toBe("mtmc.stepApplied");
    // The step action gets its edit on resolve.
    const resolved = await middleware.resolveCodeAction(listed[1], {}, async (item: any) => ({
      ...item,
      edit: stepAction("step", [{ range: range(line, 4, 7), newText: "pid_n" }]).edit,
    }));
    expect(resolved.command).toBeUndefined();
    change(TRITON_SOURCE.replace("    pid = tl.program_id(0)", "    pid_n = tl.program_id(0)"));
    await flush();
    expect(lastClient().executedCommands).toContainEqual(["mtmc.stepApplied", TRITON_URI, "step"]);
    expect(lastClient().executedCommands).not.toContainEqual(["mtmc.stepApplied", TRITON_URI, "quick"]);
  });
});
