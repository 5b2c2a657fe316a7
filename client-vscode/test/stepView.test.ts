import { beforeEach, describe, expect, it } from "vitest";
import { parseStep, parseStepHistory, parseVerification, Step } from "../src/protocol";
import { cumulativeSpeedup, renderChartHtml, renderSpeedupSvg } from "../src/speedupChart";
import { SHOW_STEP_DIFF_COMMAND, stepDescription, StepTreeProvider } from "../src/stepTree";
import { activateExtension, flush, lastClient, resetAll, TRITON_URI } from "./helpers";
import { LanguageClient } from "./mocks/languageclient";
import { makeDocument, makeEditor, mock } from "./mocks/vscode";

function step(partial: Partial<Step> & { id: string }): Step {
  return { index: 1, kernel: "matmul_kernel", title: "Apply tiling", status: "applied", ...partial };
}

const HISTORY = {
  uri: TRITON_URI,
  steps: [
    {
      id: "a", index: 1, kernel: "add_kernel", status: "accepted", candidate: { title: "Tiling BLOCK=1024" },
      textBefore: "BLOCK = 128\n", textAfter: "BLOCK = 1024\n",
      verification: { mode: "gpu", ok: true, speed: { baselineMs: 2.0, newMs: 1.0 } },
    },
    {
      id: "b", index: 2, kernel: "add_kernel", status: "applied", candidate: { title: "num_warps=8" },
      textBefore: "BLOCK = 1024\n", textAfter: "BLOCK = 1024  # warps\n",
      verification: { mode: "interpreter", ok: true },
    },
    { id: "c", index: 1, kernel: "scale_kernel", status: "rejected", title: "Mask <loads>", verification: null },
  ],
};

beforeEach(() => {
  resetAll();
  LanguageClient.requestHandler = (_method, params) => (params.command === "mtmc.stepHistory" ? HISTORY : null);
});

describe("parsing steps", () => {
  it("reads the candidate title, status and speed from a step", () => {
    const parsed = parseStepHistory(HISTORY);
    expect(parsed.map((s) => [s.id, s.kernel, s.title, s.status])).toEqual([
      ["a", "add_kernel", "Tiling BLOCK=1024", "accepted"],
      ["b", "add_kernel", "num_warps=8", "applied"],
      ["c", "scale_kernel", "Mask <loads>", "rejected"],
    ]);
    expect(parsed[0].verification).toMatchObject({ state: "passed", mode: "gpu", beforeMs: 2, afterMs: 1, speedup: 2 });
    expect(parsed[2].verification).toBeUndefined();
  });

  it("reads the server's report: state, summary, speed in ms, and distrusts unbelieved speedups", () => {
    const report = {
      status: "verified", state: "passed", mode: "gpu", summary: "1.80x faster than previous", error: null,
      speed: { baseline_ms: 1.8, candidate_ms: 1.0, speedup: 1.8, believed: true },
    };
    expect(parseVerification(report)).toMatchObject({ state: "passed", beforeMs: 1.8, afterMs: 1.0, speedup: 1.8, message: "1.80x faster than previous" });
    const suspicious = { ...report, speed: { ...report.speed, speedup: 40, candidate_ms: 0.045, believed: false } };
    const parsed = parseVerification(suspicious)!;
    expect(parsed.speedup).toBeUndefined();
    expect(stepDescription(step({ id: "s", verification: parsed }))).toBe("applied · 1.80 ms → 45.0 µs · passed, speedup not believed");
  });

  it("never invents a speedup without times", () => {
    expect(parseVerification({ mode: "interpreter", correct: true, speed: null })).toMatchObject({ state: "passed", speedup: undefined });
    expect(parseVerification({ status: "failed", error: "mismatch at [3]" })).toMatchObject({ state: "failed", message: "mismatch at [3]" });
  });

  it("drops malformed steps", () => {
    expect(parseStep({ title: "no id" }, 0)).toBeUndefined();
    expect(parseStepHistory({ steps: "nope" })).toEqual([]);
    expect(parseStepHistory(null)).toEqual([]);
  });
});

describe("the step tree", () => {
  it("groups steps under their kernels with status and measured times", async () => {
    const tree = new StepTreeProvider(async () => parseStepHistory(HISTORY));
    await tree.setDocument(TRITON_URI);
    const kernels = tree.getChildren();
    expect(kernels.map((k) => tree.getTreeItem(k).label)).toEqual(["add_kernel", "scale_kernel"]);
    expect(tree.getTreeItem(kernels[0]).description).toBe("2 steps, 1 accepted");
    const items = tree.getChildren(kernels[0]).map((node) => tree.getTreeItem(node));
    expect(items.map((item) => item.label)).toEqual(["1. Tiling BLOCK=1024", "2. num_warps=8"]);
    expect(items[0].description).toBe("accepted · 2.00 ms → 1.00 ms · 2.00x");
    expect(items[1].description).toBe("applied · passed (interpreter, no timing)");
    expect(items.map((item) => item.contextValue)).toEqual(["mtmcStep.accepted", "mtmcStep.applied"]);
    expect(items[0].tooltip).toBe("1. Tiling BLOCK=1024\naccepted · 2.00 ms → 1.00 ms · 2.00x");
    expect(items[0].command?.command).toBe(SHOW_STEP_DIFF_COMMAND);
    expect(tree.message).toBeUndefined();
  });

  it("formats small times in microseconds", () => {
    const s = step({ id: "x", verification: { state: "passed", beforeMs: 0.05, afterMs: 0.025, speedup: 2 } });
    expect(stepDescription(s)).toBe("applied · 50.0 µs → 25.0 µs · 2.00x");
    expect(stepDescription(step({ id: "y" }))).toBe("applied · not verified");
  });

  it("reloads on mtmc/stepsChanged for the shown document only", async () => {
    let loads = 0;
    const tree = new StepTreeProvider(async () => {
      loads++;
      return [];
    });
    await tree.setDocument(TRITON_URI);
    await tree.onStepsChanged("file:///ws/other.py");
    expect(loads).toBe(1);
    await tree.onStepsChanged(TRITON_URI);
    expect(loads).toBe(2);
    expect(tree.message).toMatch(/No steps yet/);
  });

  it("shows a load failure as the view message", async () => {
    const tree = new StepTreeProvider(async () => {
      throw new Error("server not running");
    });
    await tree.setDocument(TRITON_URI);
    expect(tree.getChildren()).toEqual([]);
    expect(tree.message).toBe("Could not load the steps: server not running");
  });
});

describe("the step view in the extension", () => {
  it("follows the active Triton editor and refreshes on the server's notification", async () => {
    const { api } = await activateExtension();
    expect(api.steps.currentDocument).toBe(TRITON_URI);
    expect(mock.treeViews[0].message).toBeUndefined();
    const loadsBefore = lastClient().executedCommands.length;
    lastClient().emit("mtmc/stepsChanged", { uri: TRITON_URI });
    await flush();
    expect(lastClient().executedCommands.slice(loadsBefore)).toEqual([["mtmc.stepHistory", TRITON_URI]]);
    // A diff editor (non-file scheme) becomes active: the view keeps its document.
    const diffDocument = { ...makeDocument("/x", "BLOCK = 1024\n"), uri: { scheme: "mtmc-step", toString: () => "mtmc-step:/a/after/add.py" } };
    mock.events.changeActiveEditor.fire(makeEditor(diffDocument as any));
    await flush();
    expect(api.steps.currentDocument).toBe(TRITON_URI);
    // A plain Python file empties it.
    mock.events.changeActiveEditor.fire(makeEditor(makeDocument("/ws/plain.py", "print(1)\n")));
    await flush();
    expect(api.steps.currentDocument).toBeUndefined();
    expect(mock.treeViews[0].message).toMatch(/Open a Triton file/);
  });

  it("clicking a step opens its diff between virtual before/after documents", async () => {
    const { api } = await activateExtension();
    const node = api.steps.getChildren(api.steps.getChildren()[0])[0];
    const item = api.steps.getTreeItem(node);
    await mock.commands.get(item.command!.command)!(...item.command!.arguments!);
    const diff = mock.executed.find(([id]) => id === "vscode.diff")!;
    const [, before, after, title] = diff as [string, any, any, string];
    expect(before.toString()).toBe("mtmc-step:/a/before/add.py");
    expect(after.toString()).toBe("mtmc-step:/a/after/add.py");
    expect(title).toBe("add_kernel: step 1, Tiling BLOCK=1024 (accepted)");
    const provider = mock.contentProviders.get("mtmc-step");
    expect(provider.provideTextDocumentContent(before)).toBe("BLOCK = 128\n");
    expect(provider.provideTextDocumentContent(after)).toBe("BLOCK = 1024\n");
  });

  it("says so when a step has no stored texts", async () => {
    const { api } = await activateExtension();
    const node = api.steps.getChildren(api.steps.getChildren()[1])[0];
    await mock.commands.get(SHOW_STEP_DIFF_COMMAND)!(node);
    expect(mock.executed.find(([id]) => id === "vscode.diff")).toBeUndefined();
    expect(mock.messages.at(-1)?.text).toMatch(/has no stored texts/);
  });
});

describe("the speedup chart", () => {
  const steps = [
    step({ id: "1", index: 1, status: "accepted", verification: { state: "passed", speedup: 2 } }),
    step({ id: "2", index: 2, status: "rejected", verification: { state: "passed", speedup: 0.5 } }),
    step({ id: "3", index: 3, status: "accepted", verification: { state: "passed", speedup: 1.5 } }),
    step({ id: "4", index: 4, status: "applied", title: "<script>alert(1)</script>", verification: { state: "passed", mode: "interpreter" } }),
  ];

  it("draws one bar per step, faster and slower apart, unmeasured as n/a", () => {
    const svg = renderSpeedupSvg("matmul_kernel", steps);
    expect(svg.match(/<rect /g)).toHaveLength(4);
    expect(svg.match(/class="bar faster/g)).toHaveLength(2);
    expect(svg.match(/class="bar slower/g)).toHaveLength(1);
    expect(svg).toContain("2.00x");
    expect(svg).toContain(">n/a<");
    expect(svg).not.toContain("<script>");
    expect(svg).toContain("&lt;script&gt;");
  });

  it("multiplies the accepted steps' speedups", () => {
    expect(cumulativeSpeedup(steps)).toBeCloseTo(3);
    expect(cumulativeSpeedup([])).toBe(1);
  });

  it("renders a page without scripts or remote content", () => {
    const html = renderChartHtml("matmul.py", steps);
    expect(html).toContain("default-src 'none'");
    expect(html).toContain("<b>3.00x</b>");
    expect(html).not.toMatch(/<script|https?:\/\/(?!www\.w3\.org)/);
  });
});
