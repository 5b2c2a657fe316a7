// A minimal editor for protocol tests: starts the real `mtmc serve` over stdio with vscode-jsonrpc,
// advertises VS Code's relevant capabilities, keeps document texts, and applies workspace edits.
import { ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { createMessageConnection, MessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { SERVE_ARGS } from "../src/python";

export const REPO = resolve(__dirname, "..", "..");

/** The interpreter with mtmc_lsp installed, or why there is none (the test skips with it). */
export function findServerPython(): { python?: string; reason?: string } {
  const python = process.env.MTMC_PYTHON ?? resolve(REPO, ".venv", "bin", "python");
  if (!existsSync(python)) return { reason: `no Python at ${python} (run scripts/setup.sh, or set MTMC_PYTHON)` };
  const probe = spawnSync(python, ["-c", "import mtmc_lsp.server.app"], { encoding: "utf8", timeout: 60_000 });
  if (probe.status !== 0) return { reason: `${python} cannot import mtmc_lsp.server.app: ${(probe.stderr || "").trim().split("\n").pop()}` };
  return { python };
}

export interface Position { line: number; character: number }
export interface Range { start: Position; end: Position }
export interface TextEdit { range: Range; newText: string; annotationId?: string }
export interface Diagnostic { range: Range; code?: string | number; source?: string; message: string; severity?: number; data?: unknown }

function offsetAt(text: string, position: Position): number {
  // UTF-16 positions, which JavaScript strings index natively.
  let offset = 0;
  for (let line = 0; line < position.line; line++) {
    const next = text.indexOf("\n", offset);
    if (next < 0) return text.length;
    offset = next + 1;
  }
  const lineEnd = text.indexOf("\n", offset);
  return Math.min(offset + position.character, lineEnd < 0 ? text.length : lineEnd);
}

/** Apply LSP text edits (non-overlapping, positions in the original text) to a string. */
export function applyTextEdits(text: string, edits: TextEdit[]): string {
  const sorted = edits
    .map((edit) => ({ start: offsetAt(text, edit.range.start), end: offsetAt(text, edit.range.end), newText: edit.newText }))
    .sort((a, b) => b.start - a.start);
  let result = text;
  for (const edit of sorted) result = result.slice(0, edit.start) + edit.newText + result.slice(edit.end);
  return result;
}

export class LspSession {
  readonly connection: MessageConnection;
  readonly documents = new Map<string, { text: string; version: number }>();
  readonly diagnostics: { uri: string; version?: number; diagnostics: Diagnostic[] }[] = [];
  readonly statuses: unknown[] = [];
  readonly stepsChanged: string[] = [];
  readonly appliedEdits: any[] = [];
  readonly log: string[] = [];
  private waiters: (() => void)[] = [];
  private stderr = "";

  private constructor(readonly process: ChildProcess, private readonly settings: Record<string, unknown>) {
    this.connection = createMessageConnection(new StreamMessageReader(process.stdout!), new StreamMessageWriter(process.stdin!));
    process.stderr!.on("data", (chunk) => (this.stderr += chunk.toString()));
    const c = this.connection;
    c.onNotification("textDocument/publishDiagnostics", (params: any) => {
      this.diagnostics.push(params);
      this.wake();
    });
    c.onNotification("mtmc/status", (params) => {
      this.statuses.push(params);
      this.wake();
    });
    c.onNotification("mtmc/stepsChanged", (params: any) => {
      this.stepsChanged.push(params.uri);
      this.wake();
    });
    c.onNotification("window/logMessage", (params: any) => this.log.push(params.message));
    c.onNotification("window/showMessage", (params: any) => this.log.push(`[shown] ${params.message}`));
    c.onNotification("$/progress", () => undefined);
    c.onRequest("workspace/configuration", (params: any) => params.items.map((item: any) => (item.section === "mtmc" ? this.settings : null)));
    c.onRequest("client/registerCapability", () => null);
    c.onRequest("client/unregisterCapability", () => null);
    c.onRequest("window/workDoneProgress/create", () => null);
    c.onRequest("window/showMessageRequest", () => null);
    c.onRequest("workspace/codeLens/refresh", () => null);
    c.onRequest("workspace/diagnostic/refresh", () => null);
    c.onRequest("workspace/applyEdit", (params: any) => {
      this.appliedEdits.push(params);
      const applied = this.applyWorkspaceEdit(params.edit);
      this.wake();
      return applied ? { applied: true } : { applied: false, failureReason: "document version mismatch" };
    });
    c.listen();
  }

  static async start(python: string, workspace: string, settings: Record<string, unknown>): Promise<LspSession> {
    const child = spawn(python, SERVE_ARGS, { cwd: workspace, stdio: ["pipe", "pipe", "pipe"] });
    const session = new LspSession(child, settings);
    const rootUri = `file://${workspace}`;
    const result: any = await session.connection.sendRequest("initialize", {
      processId: process.pid,
      clientInfo: { name: "Visual Studio Code", version: "1.99.0" },
      rootUri,
      workspaceFolders: [{ uri: rootUri, name: "ws" }],
      initializationOptions: { mtmc: settings, trusted: settings.trusted },
      capabilities: {
        general: { positionEncodings: ["utf-16"] },
        window: { workDoneProgress: true, showMessage: {} },
        workspace: {
          configuration: true,
          applyEdit: true,
          workspaceFolders: true,
          didChangeConfiguration: { dynamicRegistration: true },
          executeCommand: { dynamicRegistration: true },
          codeLens: { refreshSupport: true },
          workspaceEdit: {
            documentChanges: true,
            resourceOperations: ["create", "rename", "delete"],
            failureHandling: "textOnlyTransactional",
            normalizesLineEndings: true,
            changeAnnotationSupport: { groupsOnLabel: true },
          },
        },
        textDocument: {
          synchronization: { dynamicRegistration: true, didSave: true, willSave: true },
          publishDiagnostics: { relatedInformation: true, versionSupport: true, codeDescriptionSupport: true, dataSupport: true,
            tagSupport: { valueSet: [1, 2] } },
          codeAction: {
            dynamicRegistration: true,
            isPreferredSupport: true,
            disabledSupport: true,
            dataSupport: true,
            resolveSupport: { properties: ["edit"] },
            honorsChangeAnnotations: true,
            codeActionLiteralSupport: { codeActionKind: { valueSet: ["", "quickfix", "refactor", "refactor.extract",
              "refactor.inline", "refactor.rewrite", "source", "source.organizeImports"] } },
          },
          hover: { contentFormat: ["markdown", "plaintext"] },
          codeLens: {},
        },
      },
    });
    await session.connection.sendNotification("initialized", {});
    (session as any).capabilities = result.capabilities;
    (session as any).serverInfo = result.serverInfo;
    return session;
  }

  get serverCapabilities(): any {
    return (this as any).capabilities;
  }

  get serverStderr(): string {
    return this.stderr;
  }

  private wake(): void {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  /** Resolve with the first non-undefined value of `probe`, re-checking after every server message. */
  async waitFor<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs: number, pollMs = 0): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await probe();
      if (value !== undefined) return value;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}; server log tail: ${this.log.slice(-8).join(" | ")} ${this.stderr.slice(-1500)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, pollMs > 0 ? Math.min(pollMs, left) : left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  open(uri: string, text: string): void {
    this.documents.set(uri, { text, version: 1 });
    void this.connection.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "python", version: 1, text } });
  }

  text(uri: string): string {
    return this.documents.get(uri)!.text;
  }

  version(uri: string): number {
    return this.documents.get(uri)!.version;
  }

  /** Apply a WorkspaceEdit like VS Code after the Refactor Preview is confirmed: all or nothing. */
  applyWorkspaceEdit(edit: any): boolean {
    const changes: { uri: string; version?: number | null; edits: TextEdit[] }[] = [];
    for (const change of edit.documentChanges ?? []) {
      if (change.kind) return false; // file operations are not expected from this server
      changes.push({ uri: change.textDocument.uri, version: change.textDocument.version, edits: change.edits });
    }
    for (const [uri, edits] of Object.entries(edit.changes ?? {})) changes.push({ uri, edits: edits as TextEdit[] });
    for (const change of changes) {
      const document = this.documents.get(change.uri);
      if (!document) return false;
      if (change.version != null && change.version !== document.version) return false;
    }
    for (const change of changes) {
      const document = this.documents.get(change.uri)!;
      document.text = applyTextEdits(document.text, change.edits);
      document.version += 1;
      void this.connection.sendNotification("textDocument/didChange", {
        textDocument: { uri: change.uri, version: document.version },
        contentChanges: [{ text: document.text }],
      });
    }
    return true;
  }

  executeCommand<T = unknown>(command: string, args: unknown[]): Promise<T> {
    return this.connection.sendRequest("workspace/executeCommand", { command, arguments: args }) as Promise<T>;
  }

  async stop(): Promise<void> {
    try {
      await Promise.race([this.connection.sendRequest("shutdown"), new Promise((r) => setTimeout(r, 5000))]);
      await this.connection.sendNotification("exit");
    } catch {
      // The process may already be gone.
    }
    this.connection.dispose();
    await new Promise((r) => setTimeout(r, 300));
    if (this.process.exitCode === null) this.process.kill();
  }
}
