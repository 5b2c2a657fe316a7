// The status bar item: target GPU, policy model state and the verification queue (from `mtmc/status`).
import * as vscode from "vscode";
import { ServerStatus } from "./protocol";

const MODEL_LABELS: Record<string, string> = {
  "not loaded": "model not loaded",
  loading: "model loading",
  ready: "model ready",
  off: "model off",
};

/** The status bar text for a status (pure, for tests). */
export function statusText(status: ServerStatus | undefined, running: boolean, trusted: boolean): string {
  if (!running) return "$(circle-slash) MTMC: stopped";
  if (!status) return "$(sync~spin) MTMC: starting";
  const parts = [`$(chip) ${status.target || "auto"}`];
  parts.push(status.model === "loading" ? "$(sync~spin) model loading" : MODEL_LABELS[status.model] ?? `model ${status.model}`);
  if (status.queue > 0) parts.push(`$(beaker) ${status.queue} verifying`);
  if (!trusted) parts.push("$(shield) restricted");
  return parts.join("  ");
}

export function statusTooltip(status: ServerStatus | undefined, trusted: boolean): string {
  const lines = ["MTMC Triton: click to select the target GPU"];
  if (status) {
    lines.push(`Target GPU: ${status.target || "auto"}`, `Policy model: ${status.model}`, `Verification queue: ${status.queue}`);
  }
  if (!trusted) lines.push("Restricted Mode: static analysis only; nothing runs your kernels until you trust this workspace.");
  return lines.join("\n");
}

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private status: ServerStatus | undefined;
  private running = false;

  constructor(private readonly isTrusted: () => boolean, command: string) {
    this.item = vscode.window.createStatusBarItem("mtmc.status", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "MTMC Triton";
    this.item.command = command;
    this.render();
  }

  get text(): string {
    return this.item.text;
  }

  setStatus(status: ServerStatus): void {
    this.status = status;
    this.render();
  }

  setRunning(running: boolean): void {
    this.running = running;
    if (!running) this.status = undefined;
    this.render();
  }

  show(): void {
    this.item.show();
  }

  render(): void {
    const trusted = this.isTrusted();
    this.item.text = statusText(this.status, this.running, trusted);
    this.item.tooltip = statusTooltip(this.status, trusted);
  }

  dispose(): void {
    this.item.dispose();
  }
}
