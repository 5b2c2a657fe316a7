// The step view: the active document's kernels, each with its optimization steps, their status and
// measured times (from `mtmc.stepHistory`, refreshed on `mtmc/stepsChanged`).
import * as vscode from "vscode";
import { Step } from "./protocol";

export const SHOW_STEP_DIFF_COMMAND = "mtmc.client.showStepDiff";

export interface KernelNode {
  type: "kernel";
  kernel: string;
  documentUri: string;
  steps: Step[];
}

export interface StepNode {
  type: "step";
  step: Step;
  documentUri: string;
}

export type StepViewNode = KernelNode | StepNode;

/** Loads a document's steps; the server call lives elsewhere so this view stays testable. */
export type StepLoader = (documentUri: string) => Promise<Step[]>;

/** Group steps by kernel, keeping the order in which kernels first appear, steps by index. */
export function groupByKernel(steps: Step[]): Map<string, Step[]> {
  const groups = new Map<string, Step[]>();
  for (const step of [...steps].sort((a, b) => a.index - b.index)) {
    const list = groups.get(step.kernel) ?? [];
    list.push(step);
    groups.set(step.kernel, list);
  }
  return groups;
}

function formatMs(ms: number): string {
  return ms >= 100 ? `${ms.toFixed(0)} ms` : ms >= 1 ? `${ms.toFixed(2)} ms` : `${(ms * 1000).toFixed(1)} µs`;
}

/** "accepted · 1.20 ms → 0.95 ms (1.26x)" */
export function stepDescription(step: Step): string {
  const parts: string[] = [step.status];
  const v = step.verification;
  if (v) {
    if (v.beforeMs !== undefined && v.afterMs !== undefined) {
      parts.push(`${formatMs(v.beforeMs)} → ${formatMs(v.afterMs)}`);
    } else if (v.afterMs !== undefined) {
      parts.push(formatMs(v.afterMs));
    }
    if (v.speedup !== undefined) parts.push(`${v.speedup.toFixed(2)}x`);
    else if (v.speedBelieved === false) parts.push(`${v.state}, speedup not believed`);
    else parts.push(v.mode === "interpreter" ? `${v.state} (interpreter, no timing)` : v.state);
  } else {
    parts.push("not verified");
  }
  return parts.join(" · ");
}

function stepIcon(step: Step): vscode.ThemeIcon {
  const state = step.verification?.state;
  if (state === "pending" || state === "running" || state === "queued") return new vscode.ThemeIcon("sync~spin");
  if (state === "failed" || state === "error") return new vscode.ThemeIcon("error", new vscode.ThemeColor("testing.iconFailed"));
  switch (step.status) {
    case "accepted":
      return new vscode.ThemeIcon("pass", new vscode.ThemeColor("testing.iconPassed"));
    case "rejected":
      return new vscode.ThemeIcon("circle-slash");
    default:
      return new vscode.ThemeIcon("circle-outline");
  }
}

export class StepTreeProvider implements vscode.TreeDataProvider<StepViewNode>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<StepViewNode | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private documentUri: string | undefined;
  private steps: Step[] = [];
  private loadError: string | undefined;

  constructor(private readonly load: StepLoader) {}

  get currentDocument(): string | undefined {
    return this.documentUri;
  }

  get currentSteps(): Step[] {
    return this.steps;
  }

  get message(): string | undefined {
    if (this.loadError) return `Could not load the steps: ${this.loadError}`;
    if (!this.documentUri) return "Open a Triton file to see its optimization steps.";
    if (this.steps.length === 0) return "No steps yet: apply an optimization from a code action (Ctrl+.) or run \"MTMC: Optimize Kernel\".";
    return undefined;
  }

  findStep(stepId: string): Step | undefined {
    return this.steps.find((step) => step.id === stepId);
  }

  /** Show the steps of `documentUri` (undefined: no Triton document is active). */
  async setDocument(documentUri: string | undefined): Promise<void> {
    this.documentUri = documentUri;
    await this.refresh();
  }

  /** Reload the steps when `uri` is the document on show (`mtmc/stepsChanged`). */
  async onStepsChanged(uri: string): Promise<void> {
    if (uri === this.documentUri) await this.refresh();
  }

  async refresh(): Promise<void> {
    const uri = this.documentUri;
    this.loadError = undefined;
    if (!uri) {
      this.steps = [];
    } else {
      try {
        const steps = await this.load(uri);
        if (uri !== this.documentUri) return; // the user moved on while loading
        this.steps = steps;
      } catch (error) {
        this.steps = [];
        this.loadError = error instanceof Error ? error.message : String(error);
      }
    }
    this.changed.fire(undefined);
  }

  getChildren(node?: StepViewNode): StepViewNode[] {
    if (!this.documentUri) return [];
    const documentUri = this.documentUri;
    if (!node) {
      return [...groupByKernel(this.steps)].map(([kernel, steps]) => ({ type: "kernel", kernel, documentUri, steps }));
    }
    if (node.type === "kernel") return node.steps.map((step) => ({ type: "step", step, documentUri }));
    return [];
  }

  getTreeItem(node: StepViewNode): vscode.TreeItem {
    if (node.type === "kernel") {
      const item = new vscode.TreeItem(node.kernel, vscode.TreeItemCollapsibleState.Expanded);
      const accepted = node.steps.filter((s) => s.status === "accepted").length;
      item.description = `${node.steps.length} step${node.steps.length === 1 ? "" : "s"}, ${accepted} accepted`;
      item.iconPath = new vscode.ThemeIcon("symbol-function");
      item.contextValue = "mtmcKernel";
      item.id = `${node.documentUri}#${node.kernel}`;
      return item;
    }
    const step = node.step;
    const item = new vscode.TreeItem(`${step.index}. ${step.title}`, vscode.TreeItemCollapsibleState.None);
    item.description = stepDescription(step);
    // The description is cut short in a narrow side bar: the tooltip has all of it.
    item.tooltip = [`${step.index}. ${step.title}`, stepDescription(step), step.verification?.message ?? ""].filter(Boolean).join("\n");
    item.iconPath = stepIcon(step);
    item.contextValue = `mtmcStep.${step.status}`;
    item.id = `${node.documentUri}#${step.kernel}#${step.id}`;
    item.command = { command: SHOW_STEP_DIFF_COMMAND, title: "Show Step Diff", arguments: [node] };
    return item;
  }

  dispose(): void {
    this.changed.dispose();
  }
}
