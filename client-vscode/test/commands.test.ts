import { readFileSync } from "node:fs";
import { beforeEach, describe, expect, it } from "vitest";
import { ClientCommands } from "../src/commands";
import { activateExtension, flush, lastClient, resetAll, TRITON_URI } from "./helpers";
import { LanguageClient } from "./mocks/languageclient";
import { ConfigurationTarget, makeDocument, makeEditor, mock, Uri } from "./mocks/vscode";

const STEPS = {
  uri: TRITON_URI,
  steps: [
    { id: "s1", index: 1, kernel: "add_kernel", candidate: { title: "Apply tiling (BLOCK=1024)" }, status: "applied" },
    { id: "s2", index: 2, kernel: "add_kernel", candidate: { title: "Use 8 warps" }, status: "accepted" },
  ],
};

const TARGETS = [
  { key: "H100", name: "NVIDIA H100", summary: "132 SMs, 227 KB shared memory" },
  { key: "A100", name: "NVIDIA A100", summary: "108 SMs, 163 KB shared memory" },
];

beforeEach(() => {
  resetAll();
  LanguageClient.requestHandler = (method, params) => {
    if (method !== "workspace/executeCommand") return null;
    if (params.command === "mtmc.stepHistory") return STEPS;
    if (params.command === "mtmc.listTargets") return TARGETS;
    return null;
  };
});

async function run(command: string, ...args: unknown[]): Promise<void> {
  const handler = mock.commands.get(command);
  if (!handler) throw new Error(`${command} is not registered`);
  await handler(...args);
  await flush();
}

const sent = () => lastClient().executedCommands.filter(([command]) => command !== "mtmc.stepHistory");

describe("contributions", () => {
  it("registers every contributed command, none of them a server command id", async () => {
    await activateExtension();
    const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    const contributed: string[] = manifest.contributes.commands.map((c: { command: string }) => c.command);
    expect(contributed.sort()).toEqual([...mock.commands.keys()].sort());
    expect(contributed.sort()).toEqual(Object.values(ClientCommands).sort());
    // vscode-languageclient registers the server's ids (mtmc.optimizeKernel, ...) for code actions.
    for (const id of contributed) expect(id.startsWith("mtmc.client.")).toBe(true);
  });

  it("hides optimize and verify from the palette in Restricted Mode", () => {
    const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    const palette = manifest.contributes.menus.commandPalette;
    for (const id of [ClientCommands.optimizeKernel, ClientCommands.verifyKernel]) {
      expect(palette.find((entry: { command: string }) => entry.command === id)?.when).toBe("isWorkspaceTrusted");
    }
  });
});

describe("Optimize Kernel and Verify Kernel", () => {
  it("optimizes the kernel under the cursor", async () => {
    await activateExtension({ line: 7 });
    LanguageClient.requestHandler = (_method, params) =>
      params.command === "mtmc.optimizeKernel"
        ? { applied: 2, kept: 2, tried: 5, stopped: "steps", offer: "all kept steps applied" }
        : STEPS;
    await run(ClientCommands.optimizeKernel);
    expect(sent()).toEqual([["mtmc.optimizeKernel", TRITON_URI, "add_kernel"]]);
    expect(mock.messages.at(-1)).toMatchObject({
      level: "info",
      text: "MTMC: add_kernel: 2 steps applied for review (2 kept, 5 tried, stopped: steps).",
    });
  });

  it("optimizes a kernel chosen in the step view", async () => {
    await activateExtension({ line: 0 });
    await run(ClientCommands.optimizeKernel, { type: "kernel", kernel: "scale_kernel", documentUri: TRITON_URI, steps: [] });
    expect(sent()).toEqual([["mtmc.optimizeKernel", TRITON_URI, "scale_kernel"]]);
  });

  it("works on the step view's document when a step diff is the active editor", async () => {
    const { api } = await activateExtension({ line: 7 });
    expect(api.steps.currentDocument).toBe(TRITON_URI);
    const diffSide = { ...makeDocument("/a/after/add.py", "x = 1\n"), uri: Uri.parse("mtmc-step:/a/after/add.py") };
    mock.activeEditor = makeEditor(diffSide as any, 0);
    mock.pickChoice = (items) => items[1];
    await run(ClientCommands.optimizeKernel);
    expect(sent()).toEqual([["mtmc.optimizeKernel", TRITON_URI, "scale_kernel"]]);
  });

  it("asks which kernel when the cursor is above all of them", async () => {
    await activateExtension({ line: 0 });
    mock.pickChoice = (items) => items.find((item: { label: string }) => item.label === "scale_kernel");
    await run(ClientCommands.optimizeKernel);
    expect(mock.quickPicks[0].map((item: { label: string }) => item.label)).toEqual(["add_kernel", "scale_kernel"]);
    expect(sent()).toEqual([["mtmc.optimizeKernel", TRITON_URI, "scale_kernel"]]);
  });

  it("verifies the whole file when the cursor is outside a kernel, and reports the outcome", async () => {
    await activateExtension({ line: 0 });
    LanguageClient.requestHandler = (_method, params) =>
      params.command === "mtmc.verifyKernel"
        ? { status: "incorrect", state: "failed", summary: "max abs error 0.5 at [3, 7] (seed 1)", mode: "interpreter" }
        : STEPS;
    await run(ClientCommands.verifyKernel);
    expect(sent()).toEqual([["mtmc.verifyKernel", TRITON_URI]]);
    expect(mock.messages.at(-1)).toMatchObject({
      level: "error",
      text: "MTMC: the file: verification failed: max abs error 0.5 at [3, 7] (seed 1)",
    });
  });

  it("reports an optimization that kept nothing, with the server's reason", async () => {
    await activateExtension();
    LanguageClient.requestHandler = (_method, params) =>
      params.command === "mtmc.optimizeKernel" ? { applied: 0, kept: 0, tried: 4, stopped: "no_gain", offer: "no step kept (no_gain)" } : STEPS;
    await run(ClientCommands.optimizeKernel);
    expect(mock.messages.at(-1)?.text).toBe("MTMC: add_kernel: 0 steps applied for review (0 kept, 4 tried, stopped: no_gain). no step kept (no_gain).");
  });

  it("runs nothing in Restricted Mode and says why", async () => {
    mock.trusted = false;
    mock.messageChoice = "Manage Workspace Trust";
    await activateExtension();
    await run(ClientCommands.optimizeKernel);
    await run(ClientCommands.verifyKernel);
    expect(sent()).toEqual([]);
    const warnings = mock.messages.filter((m) => m.level === "warning");
    expect(warnings).toHaveLength(2);
    expect(warnings[0].text).toMatch(/Optimize Kernel runs your kernel code.*Restricted Mode.*Static diagnostics still work/);
    expect(mock.executed).toContainEqual(["workbench.trust.manage"]);
  });

  it("reports a server error", async () => {
    await activateExtension();
    LanguageClient.requestHandler = () => {
      throw new Error("kernel has no harness");
    };
    await run(ClientCommands.verifyKernel);
    expect(mock.messages.at(-1)).toMatchObject({ level: "error", text: "MTMC: Verify Kernel failed: kernel has no harness" });
  });
});

describe("Accept Step and Reject Step", () => {
  it("accepts the step chosen in the view and reloads the steps", async () => {
    const { api } = await activateExtension();
    const node = api.steps.getChildren(api.steps.getChildren()[0])[0];
    const before = lastClient().executedCommands.length;
    await run(ClientCommands.acceptStep, node);
    const after = lastClient().executedCommands.slice(before);
    expect(after[0]).toEqual(["mtmc.acceptStep", TRITON_URI, "s1"]);
    expect(after[1]).toEqual(["mtmc.stepHistory", TRITON_URI]);
  });

  it("rejects the only applied step when run from the palette", async () => {
    await activateExtension();
    await run(ClientCommands.rejectStep);
    expect(sent()).toEqual([["mtmc.rejectStep", TRITON_URI, "s1"]]);
  });

  it("says so when no step is waiting for a decision", async () => {
    LanguageClient.requestHandler = () => ({ uri: TRITON_URI, steps: [] });
    await activateExtension();
    await run(ClientCommands.acceptStep);
    expect(sent()).toEqual([]);
    expect(mock.messages.at(-1)?.text).toMatch(/no step to choose from/);
  });
});

describe("Select Target GPU", () => {
  it("offers the server's targets, selects one and saves it in the workspace settings", async () => {
    mock.config["mtmc.targetGpu"] = "H100";
    await activateExtension();
    mock.pickChoice = (items) => items[1];
    await run(ClientCommands.selectTarget);
    expect(mock.quickPicks[0].map((i: { label: string; description: string }) => [i.label, i.description])).toEqual([
      ["NVIDIA H100", "H100 (current)"],
      ["NVIDIA A100", "A100"],
    ]);
    expect(sent()).toEqual([["mtmc.listTargets"]]); // the setting is the selection: no second command
    expect(mock.configUpdates).toEqual([{ key: "mtmc.targetGpu", value: "A100", target: ConfigurationTarget.Workspace }]);
    const pushed = lastClient().notifications.filter((n) => n.method === "workspace/didChangeConfiguration").at(-1);
    expect(pushed?.params.settings.mtmc.targetGpu).toBe("A100");
  });

  it("changes nothing when the pick is cancelled", async () => {
    await activateExtension();
    mock.pickChoice = () => undefined;
    await run(ClientCommands.selectTarget);
    expect(sent()).toEqual([["mtmc.listTargets"]]);
    expect(mock.configUpdates).toEqual([]);
  });
});

describe("Restart Server and Show Step History", () => {
  it("restarts the server", async () => {
    await activateExtension();
    const first = lastClient();
    await run(ClientCommands.restartServer);
    expect(first.state).toBe(1);
    expect(LanguageClient.instances).toHaveLength(2);
    expect(lastClient().state).toBe(2);
    expect(mock.messages.at(-1)?.text).toMatch(/restarted/);
  });

  it("focuses the step view and opens the speedup chart", async () => {
    await activateExtension();
    await run(ClientCommands.showStepHistory);
    expect(mock.executed).toContainEqual(["mtmc.steps.focus"]);
    expect(mock.webviewPanels).toHaveLength(1);
    expect(mock.webviewPanels[0].webview.html).toContain("add_kernel");
    expect(mock.webviewPanels[0].webview.html).toContain("<svg");
  });
});
