// A webview with one bar chart per kernel: the measured speedup of each step (inline SVG, no scripts,
// nothing loaded from the network).
import * as vscode from "vscode";
import { Step } from "./protocol";
import { groupByKernel } from "./stepTree";

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]!);
}

/** The product of the measured speedups of the accepted steps (1 when none is measured). */
export function cumulativeSpeedup(steps: Step[]): number {
  return steps
    .filter((s) => s.status === "accepted" && s.verification?.speedup !== undefined)
    .reduce((acc, s) => acc * s.verification!.speedup!, 1);
}

const BAR_WIDTH = 48;
const GAP = 16;
const HEIGHT = 180;
const TOP = 20;
const BOTTOM = 40;
const LEFT = 44;

/** An SVG bar chart of speedup per step; steps without a measurement get a hatched "no timing" bar. */
export function renderSpeedupSvg(kernel: string, steps: Step[]): string {
  const measured = steps.map((s) => s.verification?.speedup).filter((x): x is number => x !== undefined);
  const maxValue = Math.max(1.5, ...measured) * 1.1;
  const plotHeight = HEIGHT - TOP - BOTTOM;
  const y = (value: number) => TOP + plotHeight - (value / maxValue) * plotHeight;
  const width = LEFT + steps.length * (BAR_WIDTH + GAP) + GAP;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${Math.max(width, 240)}" height="${HEIGHT}" role="img" aria-label="Speedup per step of ${escapeHtml(kernel)}">`);
  parts.push(`<line x1="${LEFT}" y1="${y(1)}" x2="${Math.max(width, 240)}" y2="${y(1)}" class="baseline"/>`);
  parts.push(`<text x="${LEFT - 6}" y="${y(1) + 4}" text-anchor="end" class="axis">1.0x</text>`);
  steps.forEach((step, i) => {
    const x = LEFT + GAP + i * (BAR_WIDTH + GAP);
    const speedup = step.verification?.speedup;
    const label = `${step.index}`;
    const title = `<title>${escapeHtml(`${step.index}. ${step.title} (${step.status})${speedup !== undefined ? `: ${speedup.toFixed(2)}x` : ": no timing"}`)}</title>`;
    if (speedup === undefined) {
      parts.push(`<rect x="${x}" y="${y(1)}" width="${BAR_WIDTH}" height="2" class="bar none">${title}</rect>`);
      parts.push(`<text x="${x + BAR_WIDTH / 2}" y="${y(1) - 6}" text-anchor="middle" class="value">n/a</text>`);
    } else {
      const top = y(Math.max(speedup, 0));
      const cls = speedup >= 1 ? "faster" : "slower";
      parts.push(`<rect x="${x}" y="${top}" width="${BAR_WIDTH}" height="${y(0) - top}" class="bar ${cls} ${escapeHtml(step.status)}">${title}</rect>`);
      parts.push(`<text x="${x + BAR_WIDTH / 2}" y="${top - 4}" text-anchor="middle" class="value">${speedup.toFixed(2)}x</text>`);
    }
    parts.push(`<text x="${x + BAR_WIDTH / 2}" y="${HEIGHT - BOTTOM + 16}" text-anchor="middle" class="axis">${label}</text>`);
    parts.push(`<text x="${x + BAR_WIDTH / 2}" y="${HEIGHT - BOTTOM + 30}" text-anchor="middle" class="status">${escapeHtml(step.status)}</text>`);
  });
  parts.push("</svg>");
  return parts.join("");
}

/** The whole page: one chart per kernel, a strict CSP (no scripts, styles inline only). */
export function renderChartHtml(documentName: string, steps: Step[]): string {
  const sections = [...groupByKernel(steps)].map(([kernel, kernelSteps]) => {
    const total = cumulativeSpeedup(kernelSteps);
    return `<section><h2>${escapeHtml(kernel)}</h2><p>Accepted steps together: <b>${total.toFixed(2)}x</b></p>${renderSpeedupSvg(kernel, kernelSteps)}</section>`;
  });
  const body = sections.length ? sections.join("") : "<p>No steps yet.</p>";
  return `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';">
<style>
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); }
.axis, .status, .value { fill: var(--vscode-foreground); font-size: 11px; }
.status { opacity: 0.7; }
.baseline { stroke: var(--vscode-foreground); stroke-dasharray: 4 3; opacity: 0.6; }
.bar.faster { fill: var(--vscode-testing-iconPassed, #3fb950); }
.bar.slower { fill: var(--vscode-testing-iconFailed, #f85149); }
.bar.none { fill: var(--vscode-disabledForeground, #888); }
.bar.rejected { opacity: 0.4; }
</style></head><body><h1>Speedup per step: ${escapeHtml(documentName)}</h1>${body}
<p>Speedups are measured on the GPU by the verifier; interpreter runs check correctness only and show n/a.</p></body></html>`;
}

/** One chart panel, re-rendered whenever the step view reloads. */
export class SpeedupChartPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;

  get visible(): boolean {
    return this.panel !== undefined;
  }

  show(documentUri: string, steps: Step[]): void {
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel("mtmc.speedupChart", "MTMC: Speedup per Step", vscode.ViewColumn.Beside, {
        enableScripts: false,
      });
      this.panel.onDidDispose(() => (this.panel = undefined));
    } else {
      this.panel.reveal(undefined, true);
    }
    this.update(documentUri, steps);
  }

  update(documentUri: string, steps: Step[]): void {
    if (!this.panel) return;
    this.panel.webview.html = renderChartHtml(decodeURIComponent(documentUri.split("/").pop() ?? documentUri), steps);
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
