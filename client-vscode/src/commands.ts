// The extension's commands. Their ids differ from the server's (`mtmc.optimizeKernel` ...): the
// language client registers the server's own command ids itself, for code actions to call.
import * as vscode from "vscode";
import { parseTargets, parseVerification, ServerCommands, Step } from "./protocol";
import { findKernels, kernelAtLine } from "./triton";
import { KernelNode, SHOW_STEP_DIFF_COMMAND, StepNode, StepTreeProvider } from "./stepTree";
import { showStepDiff, StepContentProvider } from "./stepDiff";
import { SpeedupChartPanel } from "./speedupChart";
import { explainRestrictedMode } from "./trust";
import { llmStepCommand } from "./llmStep";

export const ClientCommands = {
  optimizeKernel: "mtmc.client.optimizeKernel",
  verifyKernel: "mtmc.client.verifyKernel",
  acceptStep: "mtmc.client.acceptStep",
  rejectStep: "mtmc.client.rejectStep",
  showStepHistory: "mtmc.client.showStepHistory",
  selectTarget: "mtmc.client.selectTarget",
  restartServer: "mtmc.client.restartServer",
  refreshSteps: "mtmc.client.refreshSteps",
  showStepDiff: SHOW_STEP_DIFF_COMMAND,
  llmStep: "mtmc.client.llmStep",
} as const;

/** What the commands need from the running extension. */
export interface CommandContext {
  executeServerCommand<T = unknown>(command: string, args: unknown[]): Promise<T>;
  restartServer(): Promise<void>;
  isTrusted(): boolean;
  steps: StepTreeProvider;
  stepContents: StepContentProvider;
  chart: SpeedupChartPanel;
  stepViewId: string;
}

function isKernelNode(arg: unknown): arg is KernelNode {
  return !!arg && typeof arg === "object" && (arg as KernelNode).type === "kernel";
}

function isStepNode(arg: unknown): arg is StepNode {
  return !!arg && typeof arg === "object" && (arg as StepNode).type === "step";
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A Python source document (a file or an untitled buffer, not a step diff's virtual document). */
export function isPythonSource(document: vscode.TextDocument): boolean {
  return document.languageId === "python" && (document.uri.scheme === "file" || document.uri.scheme === "untitled");
}

/**
 * The source document a kernel command works on, with the cursor line when it is the active editor:
 * the active editor, else (a step diff or another view is active) the document the step view shows.
 */
function sourceDocument(stepViewDocument: string | undefined): { document: vscode.TextDocument; line?: number } | undefined {
  const editor = vscode.window.activeTextEditor;
  if (editor && isPythonSource(editor.document)) return { document: editor.document, line: editor.selection.active.line };
  const shown = stepViewDocument && vscode.workspace.textDocuments.find((d) => d.uri.toString() === stepViewDocument);
  return shown ? { document: shown } : undefined;
}

/**
 * The document and kernel a kernel command works on: a step-view kernel node, else the kernel at the
 * cursor, else the only kernel, else a quick pick. `required: false` allows "the whole file".
 */
export async function resolveKernelTarget(
  arg: unknown,
  required: boolean,
  stepViewDocument?: string,
): Promise<{ uri: string; kernel?: string } | undefined> {
  if (isKernelNode(arg)) return { uri: arg.documentUri, kernel: arg.kernel };
  const source = sourceDocument(stepViewDocument);
  if (!source) {
    void vscode.window.showInformationMessage("MTMC: open a Python file with a @triton.jit kernel first.");
    return undefined;
  }
  const uri = source.document.uri.toString();
  const kernels = findKernels(source.document.getText());
  if (kernels.length === 0) {
    if (!required) return { uri };
    void vscode.window.showInformationMessage("MTMC: this file has no @triton.jit kernel.");
    return undefined;
  }
  const atCursor = source.line !== undefined ? kernelAtLine(kernels, source.line) : undefined;
  if (atCursor) return { uri, kernel: atCursor.name };
  if (kernels.length === 1) return { uri, kernel: kernels[0].name };
  if (!required) return { uri };
  const picked = await vscode.window.showQuickPick(
    kernels.map((k) => ({ label: k.name, description: `line ${k.line + 1}` })),
    { placeHolder: "Which kernel?" },
  );
  return picked ? { uri, kernel: picked.label } : undefined;
}

/** The step a step command works on: a step-view node, else a pick among the shown document's steps. */
async function resolveStep(arg: unknown, ctx: CommandContext, statuses: string[]): Promise<{ uri: string; step: Step } | undefined> {
  if (isStepNode(arg)) return { uri: arg.documentUri, step: arg.step };
  const uri = ctx.steps.currentDocument;
  const candidates = ctx.steps.currentSteps.filter((s) => statuses.includes(s.status));
  if (!uri || candidates.length === 0) {
    void vscode.window.showInformationMessage("MTMC: no step to choose from in the current document.");
    return undefined;
  }
  if (candidates.length === 1) return { uri, step: candidates[0] };
  const picked = await vscode.window.showQuickPick(
    candidates.map((step) => ({ label: `${step.kernel}: ${step.index}. ${step.title}`, description: step.status, step })),
    { placeHolder: "Which step?" },
  );
  return picked ? { uri, step: picked.step } : undefined;
}

/** Tell the user what `mtmc.optimizeKernel` did: `{applied, kept, tried, stopped, offer, reason}`. */
export function reportOptimization(kernel: string, raw: unknown): Thenable<unknown> {
  const result = (raw && typeof raw === "object" ? raw : {}) as Record<string, unknown>;
  if (result.stopped === "error") {
    return vscode.window.showErrorMessage(`MTMC: optimizing ${kernel} failed: ${String(result.reason ?? "unknown error")}`);
  }
  const count = (key: string) => (typeof result[key] === "number" ? (result[key] as number) : undefined);
  const applied = count("applied") ?? 0;
  const details = [
    count("kept") !== undefined ? `${count("kept")} kept` : undefined,
    count("tried") !== undefined ? `${count("tried")} tried` : undefined,
    typeof result.stopped === "string" ? `stopped: ${result.stopped}` : undefined,
  ].filter(Boolean).join(", ");
  const offer = typeof result.offer === "string" && applied === 0 ? ` ${result.offer}.` : "";
  return vscode.window.showInformationMessage(
    `MTMC: ${kernel}: ${applied} step${applied === 1 ? "" : "s"} applied for review${details ? ` (${details})` : ""}.${offer}`,
  );
}

/** Tell the user the outcome of `mtmc.verifyKernel` (a verification report with `state` and `summary`). */
export function reportVerification(kernel: string | undefined, raw: unknown): Thenable<unknown> {
  const report = parseVerification(raw);
  const what = kernel ?? "the file";
  if (!report) return vscode.window.showWarningMessage(`MTMC: verifying ${what} gave no report.`);
  const text = `MTMC: ${what}: verification ${report.state}${report.message ? `: ${report.message}` : ""}`;
  return report.state === "failed" ? vscode.window.showErrorMessage(text) : vscode.window.showInformationMessage(text);
}

export function registerCommands(ctx: CommandContext): vscode.Disposable[] {
  const run = async (label: string, command: string, args: unknown[]): Promise<unknown> => {
    try {
      return await ctx.executeServerCommand(command, args);
    } catch (error) {
      void vscode.window.showErrorMessage(`MTMC: ${label} failed: ${errorText(error)}`);
      return undefined;
    }
  };

  // The server reports progress (cancellable) for both jobs itself; the client reports the outcome.
  const optimizeKernel = async (arg?: unknown) => {
    if (!ctx.isTrusted()) return explainRestrictedMode("Optimize Kernel");
    const target = await resolveKernelTarget(arg, true, ctx.steps.currentDocument);
    if (!target?.kernel) return;
    const result = await run("Optimize Kernel", ServerCommands.optimizeKernel, [target.uri, target.kernel]);
    if (result !== undefined) void reportOptimization(target.kernel, result);
    await ctx.steps.refresh();
  };

  const verifyKernel = async (arg?: unknown) => {
    if (!ctx.isTrusted()) return explainRestrictedMode("Verify Kernel");
    const target = await resolveKernelTarget(arg, false, ctx.steps.currentDocument);
    if (!target) return;
    const args = target.kernel ? [target.uri, target.kernel] : [target.uri];
    const result = await run("Verify Kernel", ServerCommands.verifyKernel, args);
    if (result !== undefined) void reportVerification(target.kernel, result);
  };

  const decideStep = (accept: boolean) => async (arg?: unknown) => {
    const chosen = await resolveStep(arg, ctx, ["applied"]);
    if (!chosen) return;
    const command = accept ? ServerCommands.acceptStep : ServerCommands.rejectStep;
    await run(accept ? "Accept Step" : "Reject Step", command, [chosen.uri, chosen.step.id]);
    await ctx.steps.refresh();
  };

  const showStepHistory = async () => {
    const editor = vscode.window.activeTextEditor;
    if (editor && isPythonSource(editor.document)) {
      await ctx.steps.setDocument(editor.document.uri.toString());
    } else {
      await ctx.steps.refresh();
    }
    await vscode.commands.executeCommand(`${ctx.stepViewId}.focus`);
    if (ctx.steps.currentDocument) ctx.chart.show(ctx.steps.currentDocument, ctx.steps.currentSteps);
  };

  const selectTarget = async () => {
    const targets = parseTargets(await run("List Targets", ServerCommands.listTargets, []));
    if (targets.length === 0) return;
    const current = vscode.workspace.getConfiguration("mtmc").get<string>("targetGpu") ?? "";
    const picked = await vscode.window.showQuickPick(
      targets.map((t) => ({ label: t.name, description: t.key === current ? `${t.key} (current)` : t.key, detail: t.summary, key: t.key })),
      { placeHolder: "Target GPU for diagnostics, optimization and verification", matchOnDetail: true },
    );
    if (!picked) return;
    // The targetGpu setting is the single source of truth: writing it is the whole selection. The
    // configuration change reaches the server once, like any other setting, and refreshes once.
    const target = vscode.workspace.workspaceFolders?.length ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
    await vscode.workspace.getConfiguration("mtmc").update("targetGpu", picked.key, target);
  };

  const restartServer = async () => {
    await ctx.restartServer();
    void vscode.window.showInformationMessage("MTMC: the language server was restarted.");
  };

  const showDiff = async (arg?: unknown) => {
    if (isStepNode(arg)) await showStepDiff(ctx.stepContents, arg.step, arg.documentUri);
  };

  return [
    vscode.commands.registerCommand(ClientCommands.optimizeKernel, optimizeKernel),
    vscode.commands.registerCommand(ClientCommands.verifyKernel, verifyKernel),
    vscode.commands.registerCommand(ClientCommands.acceptStep, decideStep(true)),
    vscode.commands.registerCommand(ClientCommands.rejectStep, decideStep(false)),
    vscode.commands.registerCommand(ClientCommands.showStepHistory, showStepHistory),
    vscode.commands.registerCommand(ClientCommands.selectTarget, selectTarget),
    vscode.commands.registerCommand(ClientCommands.restartServer, restartServer),
    vscode.commands.registerCommand(ClientCommands.refreshSteps, () => ctx.steps.refresh()),
    vscode.commands.registerCommand(ClientCommands.showStepDiff, showDiff),
    vscode.commands.registerCommand(ClientCommands.llmStep, llmStepCommand({
      executeServerCommand: (command, args) => ctx.executeServerCommand(command, args),
      isTrusted: () => ctx.isTrusted(),
      resolveKernel: (arg) => resolveKernelTarget(arg, true, ctx.steps.currentDocument),
      refreshSteps: () => ctx.steps.refresh(),
    })),
  ];
}
