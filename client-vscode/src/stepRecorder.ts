// Tells the server when a step's edit really landed in the document.
//
// The server records a step when the action's command `mtmc.stepApplied` [uri, token] runs after its
// edit. VS Code runs a code action's command through a proxy that lives only as long as the code
// action list it came from; when the edit goes through the Refactor Preview, a newer list (the light
// bulb asking again) can replace it first, and VS Code then drops the command ("Actual command not
// found"), so the step would never be recorded. Instead the client takes the command off the action,
// remembers the text the document must have once the edit is applied, and sends `mtmc.stepApplied`
// itself when a change produces exactly that text (a discarded or partly applied edit never does).
import * as vscode from "vscode";

export const STEP_APPLIED_COMMAND = "mtmc.stepApplied";
/** Pending steps are forgotten after this long (a preview left open, then discarded). */
export const PENDING_TTL_MS = 30 * 60 * 1000;
const MAX_PENDING = 50;

interface Position { line: number; character: number }
interface TextEditLike { range: { start: Position; end: Position }; newText: string }

/** UTF-16 offset of an LSP/VS Code position in `text` (lines end at \n, \r\n or \r). */
function offsetAt(text: string, lineStarts: number[], position: Position): number {
  if (position.line >= lineStarts.length) return text.length;
  const start = lineStarts[position.line];
  const next = position.line + 1 < lineStarts.length ? lineStarts[position.line + 1] : text.length;
  let end = next;
  while (end > start && (text[end - 1] === "\n" || text[end - 1] === "\r")) end--;
  return Math.min(start + position.character, end);
}

function lineStartsOf(text: string): number[] {
  const starts = [0];
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === "\r" && text[i + 1] === "\n") continue;
    if (ch === "\n" || ch === "\r") starts.push(i + 1);
  }
  return starts;
}

/** `text` with non-overlapping edits (positions in `text`) applied. */
export function applyEdits(text: string, edits: TextEditLike[]): string {
  const starts = lineStartsOf(text);
  const resolved = edits
    .map((edit) => ({ start: offsetAt(text, starts, edit.range.start), end: offsetAt(text, starts, edit.range.end), newText: edit.newText }))
    .sort((a, b) => b.start - a.start);
  let result = text;
  for (const edit of resolved) result = result.slice(0, edit.start) + edit.newText + result.slice(edit.end);
  return result;
}

interface PendingStep {
  uri: string;
  token: string;
  expected: string;
  created: number;
}

export class StepRecorder implements vscode.Disposable {
  private pending: PendingStep[] = [];
  private readonly subscription: vscode.Disposable;

  constructor(
    private readonly notifyApplied: (uri: string, token: string) => Promise<unknown>,
    private readonly now: () => number = Date.now,
  ) {
    this.subscription = vscode.workspace.onDidChangeTextDocument((event) => this.onChange(event.document));
  }

  get pendingCount(): number {
    return this.pending.length;
  }

  /**
   * If `action` carries `mtmc.stepApplied` and an edit for an open document, take the command off it
   * and remember the text its edit produces. Returns the action.
   */
  take<T extends vscode.CodeAction | vscode.Command>(action: T): T {
    const codeAction = action as vscode.CodeAction;
    const command = codeAction.command;
    if (!command || typeof command !== "object" || command.command !== STEP_APPLIED_COMMAND || !codeAction.edit) return action;
    const [uri, token] = command.arguments ?? [];
    if (typeof uri !== "string" || typeof token !== "string") return action;
    const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
    if (!document) return action;
    const edits = codeAction.edit.get(document.uri);
    if (edits.length === 0) return action;
    this.remember({ uri, token, expected: applyEdits(document.getText(), edits), created: this.now() });
    codeAction.command = undefined;
    return action;
  }

  private remember(step: PendingStep): void {
    this.pending = this.pending.filter((p) => p.token !== step.token && this.now() - p.created < PENDING_TTL_MS);
    this.pending.push(step);
    if (this.pending.length > MAX_PENDING) this.pending.shift();
  }

  private onChange(document: vscode.TextDocument): void {
    const uri = document.uri.toString();
    if (!this.pending.some((p) => p.uri === uri)) return;
    const text = document.getText();
    const applied = this.pending.filter((p) => p.uri === uri && p.expected === text);
    if (applied.length === 0) return;
    this.pending = this.pending.filter((p) => !applied.includes(p));
    // Several offered actions can produce the same text; the server records the first it knows.
    void this.notifyApplied(uri, applied[applied.length - 1].token).catch(() => undefined);
  }

  dispose(): void {
    this.subscription.dispose();
    this.pending = [];
  }
}
