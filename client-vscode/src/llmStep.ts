// "MTMC: Ask the LLM Coder for a Step": the kernel under the cursor, a goal the user types, and the
// server's `mtmc.llmStep`, which asks the configured model for one small diff, checks it, and sends it
// back as a reviewable edit (the Refactor Preview) that is recorded and verified like any other step.
import * as vscode from "vscode";
import { ServerCommands } from "./protocol";
import { explainRestrictedMode } from "./trust";

/** What the command needs from the extension (kept small so it is testable with the mocked vscode). */
export interface LlmStepContext {
  executeServerCommand<T = unknown>(command: string, args: unknown[]): Promise<T>;
  isTrusted(): boolean;
  /** The document and kernel to work on: a step-view kernel node, the kernel at the cursor, else a pick. */
  resolveKernel(arg: unknown): Promise<{ uri: string; kernel?: string } | undefined>;
  refreshSteps(): Promise<void>;
}

/** The settings that choose the coder (server-side `mtmc_lsp.settings`: coder_endpoint, coder_model_path). */
export const CODER_SETTINGS = { endpoint: "coderEndpoint", model: "coderModel", modelPath: "coderModelPath" } as const;

export const NO_CODER_MESSAGE =
  "MTMC: no LLM coder is configured. Set mtmc.coderEndpoint to an OpenAI-compatible URL (with mtmc.coderModel) " +
  "or mtmc.coderModelPath to a local GGUF chat model.";

const RESTRICTED_REASON = "sends your file to the configured language model and verifies its edits by running your code";

/** Whether the `mtmc` settings name a coder (the server checks again and says why when not). */
export function coderConfigured(): boolean {
  const config = vscode.workspace.getConfiguration("mtmc");
  const set = (key: string) => (config.get<string>(key) ?? "").trim() !== "";
  return set(CODER_SETTINGS.endpoint) || set(CODER_SETTINGS.modelPath);
}

/** The user's goal for `kernel`, or undefined when the input box was dismissed or left empty. */
async function askGoal(kernel: string, previous: string | undefined): Promise<string | undefined> {
  const goal = await vscode.window.showInputBox({
    title: `MTMC: a step for ${kernel}`,
    prompt: "What should the LLM coder change? One small step in this kernel or its launch code.",
    placeHolder: "e.g. use BLOCK_SIZE 1024 and 8 warps",
    value: previous,
    ignoreFocusOut: true,
    validateInput: (value: string) => (value.trim() ? undefined : "Say what to change, e.g. 'process each row in one pass'"),
  });
  const trimmed = goal?.trim();
  return trimmed ? trimmed : undefined;
}

/**
 * Tell the user what `mtmc.llmStep` did: `{applied, status, reason, step}`. Refusals (the gate, a stale
 * version, no coder) were shown by the server already, and a discarded preview is the user's own choice.
 */
export function reportLlmStep(raw: unknown): Thenable<unknown> | undefined {
  const result = (raw && typeof raw === "object" ? raw : {}) as Record<string, unknown>;
  if (result.applied !== true) return undefined;
  const step = (result.step && typeof result.step === "object" ? result.step : {}) as Record<string, unknown>;
  const candidate = (step.candidate && typeof step.candidate === "object" ? step.candidate : {}) as Record<string, unknown>;
  const title = typeof step.title === "string" ? step.title : typeof candidate.title === "string" ? candidate.title : "the LLM step";
  const index = typeof step.index === "number" ? ` as step ${step.index}` : "";
  return vscode.window.showInformationMessage(`MTMC: ${title} applied${index}; it is verified in the background.`);
}

/** The command's handler: `arg` is a step-view kernel node, or nothing (the kernel under the cursor). */
export function llmStepCommand(ctx: LlmStepContext): (arg?: unknown) => Promise<void> {
  let lastGoal: string | undefined;
  return async (arg?: unknown) => {
    if (!ctx.isTrusted()) return explainRestrictedMode("Ask the LLM Coder", RESTRICTED_REASON);
    if (!coderConfigured()) {
      const choice = await vscode.window.showWarningMessage(NO_CODER_MESSAGE, "Open Settings");
      if (choice === "Open Settings") await vscode.commands.executeCommand("workbench.action.openSettings", "mtmc.coder");
      return;
    }
    const target = await ctx.resolveKernel(arg);
    if (!target?.kernel) return;
    const goal = await askGoal(target.kernel, lastGoal);
    if (!goal) return;
    lastGoal = goal;
    // The version the step is written for: the server refuses it if the document moves on meanwhile.
    const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === target.uri);
    if (!document) {
      void vscode.window.showInformationMessage("MTMC: open the kernel's file in an editor first.");
      return;
    }
    let result: unknown;
    try {
      result = await ctx.executeServerCommand(ServerCommands.llmStep, [target.uri, document.version, target.kernel, goal]);
    } catch (error) {
      void vscode.window.showErrorMessage(`MTMC: Ask the LLM Coder failed: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    void reportLlmStep(result);
    await ctx.refreshSteps();
  };
}
