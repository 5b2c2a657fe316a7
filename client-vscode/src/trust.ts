// Workspace Trust: what the extension says when a command would run the workspace's code.
import * as vscode from "vscode";

/** Why optimize/verify (or `what`, for the reason `why`) are off in Restricted Mode, with a way out. */
export async function explainRestrictedMode(
  what: string,
  why = "runs your kernel code (compilation, correctness and timing runs)",
): Promise<void> {
  const choice = await vscode.window.showWarningMessage(
    `MTMC: ${what} ${why}, so it is disabled while this workspace is in Restricted Mode. Static diagnostics still work. Trust the workspace to enable it.`,
    "Manage Workspace Trust",
  );
  if (choice === "Manage Workspace Trust") await vscode.commands.executeCommand("workbench.trust.manage");
}
