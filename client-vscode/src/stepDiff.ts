// Step diffs: the text before and after a step as read-only virtual documents, shown with vscode.diff.
import * as vscode from "vscode";
import { Step } from "./protocol";

export const STEP_SCHEME = "mtmc-step";

/** Virtual documents `mtmc-step:/<step id>/<before|after>/<file name>`, served from the loaded steps. */
export class StepContentProvider implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();

  private static key(stepId: string, side: "before" | "after"): string {
    return `${stepId}/${side}`;
  }

  static uriFor(step: Step, side: "before" | "after", documentUri: string): vscode.Uri {
    const fileName = documentUri.split("/").pop() || "kernel.py";
    return vscode.Uri.parse(`${STEP_SCHEME}:/${encodeURIComponent(step.id)}/${side}/${fileName}`);
  }

  remember(step: Step): boolean {
    if (step.textBefore === undefined || step.textAfter === undefined) return false;
    this.texts.set(StepContentProvider.key(step.id, "before"), step.textBefore);
    this.texts.set(StepContentProvider.key(step.id, "after"), step.textAfter);
    return true;
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    const [, stepId, side] = uri.path.split("/");
    return this.texts.get(StepContentProvider.key(decodeURIComponent(stepId), side as "before" | "after")) ?? "";
  }
}

/** Open the diff of one step; tells the user when the server sent no texts for it. */
export async function showStepDiff(provider: StepContentProvider, step: Step, documentUri: string): Promise<void> {
  if (!provider.remember(step)) {
    void vscode.window.showInformationMessage(`MTMC: step "${step.title}" has no stored texts to compare.`);
    return;
  }
  const before = StepContentProvider.uriFor(step, "before", documentUri);
  const after = StepContentProvider.uriFor(step, "after", documentUri);
  await vscode.commands.executeCommand("vscode.diff", before, after, `${step.kernel}: step ${step.index}, ${step.title} (${step.status})`);
}
