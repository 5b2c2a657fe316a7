import { readFileSync } from "node:fs";
import { beforeEach, describe, expect, it } from "vitest";
import { ClientCommands } from "../src/commands";
import { activateExtension, flush, lastClient, resetAll, TRITON_URI } from "./helpers";
import { LanguageClient } from "./mocks/languageclient";
import { mock } from "./mocks/vscode";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const GOAL = "use BLOCK 1024 and 8 warps";
const APPLIED = {
  applied: true,
  status: "applied",
  recorded: true,
  step: { id: "s3", index: 3, kernel: "add_kernel", title: `LLM: ${GOAL} (add_kernel)`, status: "applied" },
};

let llmAnswer: unknown;

beforeEach(() => {
  resetAll();
  llmAnswer = APPLIED;
  mock.config["mtmc.coderEndpoint"] = "http://gpu-host:8000/v1";
  LanguageClient.requestHandler = (method, params) => {
    if (method !== "workspace/executeCommand") return null;
    if (params.command === "mtmc.llmStep") return llmAnswer;
    if (params.command === "mtmc.stepHistory") return { uri: TRITON_URI, steps: [] };
    return null;
  };
});

async function ask(...args: unknown[]): Promise<void> {
  const handler = mock.commands.get(ClientCommands.llmStep);
  if (!handler) throw new Error(`${ClientCommands.llmStep} is not registered`);
  await handler(...args);
  await flush();
}

const llmCalls = () => lastClient().executedCommands.filter(([command]) => command === "mtmc.llmStep");

describe("Ask the LLM Coder for a Step", () => {
  it("asks for a goal for the kernel under the cursor and sends it with the document's version", async () => {
    await activateExtension({ line: 7 });
    mock.documents[0].version = 7;
    mock.inputValue = () => `  ${GOAL}  `;
    const historyBefore = lastClient().executedCommands.filter(([c]) => c === "mtmc.stepHistory").length;
    await ask();
    expect(mock.inputBoxes).toHaveLength(1);
    expect(mock.inputBoxes[0].title).toBe("MTMC: a step for add_kernel");
    expect(llmCalls()).toEqual([["mtmc.llmStep", TRITON_URI, 7, "add_kernel", GOAL]]);
    expect(mock.messages.at(-1)).toMatchObject({
      level: "info",
      text: `MTMC: LLM: ${GOAL} (add_kernel) applied as step 3; it is verified in the background.`,
    });
    // The step view reloads to show the new step.
    expect(lastClient().executedCommands.filter(([c]) => c === "mtmc.stepHistory").length).toBeGreaterThan(historyBefore);
  });

  it("works on a kernel chosen in the step view and offers the last goal again", async () => {
    await activateExtension({ line: 0 });
    mock.inputValue = () => GOAL;
    await ask({ type: "kernel", kernel: "scale_kernel", documentUri: TRITON_URI, steps: [] });
    mock.inputValue = (options) => options.value;
    await ask({ type: "kernel", kernel: "scale_kernel", documentUri: TRITON_URI, steps: [] });
    expect(mock.inputBoxes[1].value).toBe(GOAL);
    expect(llmCalls()).toEqual([
      ["mtmc.llmStep", TRITON_URI, 1, "scale_kernel", GOAL],
      ["mtmc.llmStep", TRITON_URI, 1, "scale_kernel", GOAL],
    ]);
  });

  it("asks which kernel when the cursor is in none, and refuses an empty goal in the input box", async () => {
    await activateExtension({ line: 0 });
    mock.pickChoice = (items) => items.find((item: { label: string }) => item.label === "scale_kernel");
    mock.inputValue = () => GOAL;
    await ask();
    expect(mock.quickPicks[0].map((item: { label: string }) => item.label)).toEqual(["add_kernel", "scale_kernel"]);
    expect(llmCalls()).toEqual([["mtmc.llmStep", TRITON_URI, 1, "scale_kernel", GOAL]]);
    const validate = mock.inputBoxes[0].validateInput;
    expect(validate("   ")).toMatch(/Say what to change/);
    expect(validate("tile it")).toBeUndefined();
  });

  it("sends nothing when the input box is dismissed", async () => {
    await activateExtension();
    mock.inputValue = () => undefined;
    await ask();
    mock.inputValue = () => "   ";
    await ask();
    expect(llmCalls()).toEqual([]);
    expect(mock.messages).toEqual([]);
  });

  it("leaves refusals to the server's own message", async () => {
    await activateExtension();
    llmAnswer = { applied: false, status: "refused", reason: "the diff changes 31 lines; the limit is 30" };
    mock.inputValue = () => GOAL;
    await ask();
    expect(llmCalls()).toHaveLength(1);
    expect(mock.messages).toEqual([]);
  });

  it("reports a failed request", async () => {
    await activateExtension();
    LanguageClient.requestHandler = (_method, params) => {
      if (params.command === "mtmc.llmStep") throw new Error("Internal error");
      return { uri: TRITON_URI, steps: [] };
    };
    mock.inputValue = () => GOAL;
    await ask();
    expect(mock.messages.at(-1)).toMatchObject({ level: "error", text: "MTMC: Ask the LLM Coder failed: Internal error" });
  });

  it("without a configured coder, names the settings and opens them instead of asking for a goal", async () => {
    delete mock.config["mtmc.coderEndpoint"];
    mock.config["mtmc.coderModelPath"] = "  ";
    await activateExtension();
    mock.messageChoice = "Open Settings";
    await ask();
    expect(mock.inputBoxes).toEqual([]);
    expect(llmCalls()).toEqual([]);
    const warning = mock.messages.at(-1)!;
    expect(warning.level).toBe("warning");
    expect(warning.text).toMatch(/no LLM coder is configured.*mtmc\.coderEndpoint.*mtmc\.coderModel.*mtmc\.coderModelPath/);
    expect(mock.executed).toContainEqual(["workbench.action.openSettings", "mtmc.coder"]);
  });

  it("a local GGUF is a configured coder too", async () => {
    delete mock.config["mtmc.coderEndpoint"];
    mock.config["mtmc.coderModelPath"] = "/models/coder.gguf";
    await activateExtension();
    mock.inputValue = () => GOAL;
    await ask();
    expect(llmCalls()).toHaveLength(1);
  });

  it("runs nothing in Restricted Mode and says why", async () => {
    mock.trusted = false;
    await activateExtension();
    mock.inputValue = () => GOAL;
    await ask();
    expect(llmCalls()).toEqual([]);
    expect(mock.inputBoxes).toEqual([]);
    expect(mock.messages.at(-1)?.text).toMatch(
      /^MTMC: Ask the LLM Coder sends your file to the configured language model .*Restricted Mode/,
    );
  });
});

describe("contributions", () => {
  it("is in the palette, the editor's context menu and on the step view's kernels, only in trusted workspaces", () => {
    const menus = manifest.contributes.menus;
    const when = (menu: string) => menus[menu].find((entry: { command: string }) => entry.command === ClientCommands.llmStep)?.when;
    expect(when("commandPalette")).toBe("isWorkspaceTrusted");
    expect(when("editor/context")).toMatch(/isWorkspaceTrusted/);
    expect(when("view/item/context")).toMatch(/viewItem == mtmcKernel && isWorkspaceTrusted/);
  });

  it("ignores workspace values of the coder settings in Restricted Mode", () => {
    const restricted: string[] = manifest.capabilities.untrustedWorkspaces.restrictedConfigurations;
    for (const key of ["mtmc.coderEndpoint", "mtmc.coderModel", "mtmc.coderModelPath"]) expect(restricted).toContain(key);
  });

  it("sends the coder settings to the server", async () => {
    mock.config["mtmc.coderModel"] = "Qwen/Qwen2.5-Coder-7B-Instruct";
    await activateExtension();
    const pushed = lastClient().notifications.filter((n) => n.method === "workspace/didChangeConfiguration").at(-1);
    expect(pushed?.params.settings.mtmc).toMatchObject({
      coderEndpoint: "http://gpu-host:8000/v1",
      coderModel: "Qwen/Qwen2.5-Coder-7B-Instruct",
    });
  });
});
