// The language client around `mtmc serve`: start, restart after a crash with a visible message,
// push settings without a restart, and relay the server's notifications.
import * as vscode from "vscode";
import {
  CloseAction,
  CloseHandlerResult,
  ErrorAction,
  ErrorHandler,
  ErrorHandlerResult,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { STEP_APPLIED_COMMAND, StepRecorder } from "./stepRecorder";
import { explainRestrictedMode } from "./trust";
import { ServerCommands, ServerStatus, StatusNotification, StepsChangedNotification } from "./protocol";
import { PythonCommand, resolvePython, SERVE_ARGS } from "./python";
import { readServerSettings, ServerSettings } from "./settings";

/** Crashes allowed within CRASH_WINDOW_MS before the extension stops restarting the server. */
export const MAX_CRASHES = 4;
export const CRASH_WINDOW_MS = 3 * 60 * 1000;

/** Server commands that compile or run the user's kernels. */
export const USER_CODE_COMMANDS: ReadonlySet<string> = new Set([ServerCommands.optimizeKernel, ServerCommands.verifyKernel]);

export type ClientFactory = (serverOptions: ServerOptions, clientOptions: LanguageClientOptions) => LanguageClient;

const defaultFactory: ClientFactory = (serverOptions, clientOptions) =>
  new LanguageClient("mtmc", "MTMC Triton", serverOptions, clientOptions);

/** Restart after a crash, unless it crashes too often; tell the user either way. */
export class CrashRestartHandler implements ErrorHandler {
  private crashes: number[] = [];

  constructor(private readonly onGiveUp: () => void, private readonly now: () => number = Date.now) {}

  error(): ErrorHandlerResult {
    // A broken message: keep the connection; `closed` handles a dead process.
    return { action: ErrorAction.Continue, handled: true };
  }

  closed(): CloseHandlerResult {
    const now = this.now();
    this.crashes = this.crashes.filter((t) => now - t < CRASH_WINDOW_MS);
    this.crashes.push(now);
    if (this.crashes.length > MAX_CRASHES) {
      this.onGiveUp();
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    void vscode.window.showWarningMessage(
      `MTMC: the language server stopped unexpectedly and is being restarted (${this.crashes.length} of ${MAX_CRASHES} in 3 minutes). See the "MTMC Triton" output for details.`,
    );
    return { action: CloseAction.Restart, handled: true };
  }
}

export interface ServerEvents {
  onStatus(status: ServerStatus): void;
  onStepsChanged(uri: string): void;
  onStateChanged(running: boolean): void;
}

export class MtmcServer implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private starting: Promise<LanguageClient | undefined> | undefined;
  private python: PythonCommand | undefined;
  /** Set when the server could not start or crashed too often: only an explicit restart tries again. */
  private haltedReason: string | undefined;
  readonly output: vscode.OutputChannel;
  readonly recorder: StepRecorder;

  constructor(
    private readonly events: ServerEvents,
    private readonly isTrusted: () => boolean,
    private readonly factory: ClientFactory = defaultFactory,
  ) {
    this.output = vscode.window.createOutputChannel("MTMC Triton");
    this.recorder = new StepRecorder((uri, token) => this.executeCommand(STEP_APPLIED_COMMAND, [uri, token]));
  }

  get running(): boolean {
    return this.client !== undefined && this.client.state === State.Running;
  }

  get halted(): boolean {
    return this.haltedReason !== undefined;
  }

  get interpreter(): PythonCommand | undefined {
    return this.python;
  }

  settings(): ServerSettings {
    return readServerSettings(vscode.workspace.getConfiguration("mtmc"), this.isTrusted());
  }

  /** Start the server once; concurrent callers share the same start. Resolves undefined if it cannot start. */
  start(): Promise<LanguageClient | undefined> {
    if (this.haltedReason !== undefined) return Promise.resolve(undefined);
    if (this.client && this.client.state !== State.Stopped) return Promise.resolve(this.client);
    if (!this.starting) {
      this.starting = this.doStart().finally(() => {
        this.starting = undefined;
      });
    }
    return this.starting;
  }

  private async doStart(): Promise<LanguageClient | undefined> {
    const resource = vscode.window.activeTextEditor?.document.uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
    const python = await resolvePython(resource, this.isTrusted());
    this.python = python;
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const serverOptions: ServerOptions = {
      command: python.command,
      args: [...python.args, ...SERVE_ARGS],
      transport: TransportKind.stdio,
      options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: "1" } },
    };
    const settings = this.settings();
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
      ],
      outputChannel: this.output,
      // The server reads its settings from `initializationOptions.mtmc` (server/features/lifecycle.py).
      initializationOptions: { mtmc: settings, trusted: settings.trusted },
      errorHandler: new CrashRestartHandler(() => {
        this.haltedReason = "it crashed too often";
        this.reportGiveUp();
      }),
      middleware: {
        // Code lenses and code actions may carry the server's optimize/verify commands: in Restricted
        // Mode they must not reach the server (they would run the workspace's code).
        executeCommand: async (command, args, next) => {
          if (!this.isTrusted() && USER_CODE_COMMANDS.has(command)) {
            await explainRestrictedMode(command === ServerCommands.optimizeKernel ? "Optimize Kernel" : "Verify Kernel");
            return undefined;
          }
          return next(command, args);
        },
        // Steps are recorded when their edit lands, not through the action's fragile command (stepRecorder.ts).
        provideCodeActions: async (document, range, context, token, next) => {
          const actions = await next(document, range, context, token);
          return actions ? actions.map((action) => this.recorder.take(action)) : actions;
        },
        resolveCodeAction: async (item, token, next) => {
          const resolved = await next(item, token);
          return resolved ? this.recorder.take(resolved) : resolved;
        },
        workspace: {
          // pushSettings() sends the one didChangeConfiguration per change (with `trusted`); without
          // this the client would send a second one once the server registers for the section.
          didChangeConfiguration: async () => undefined,
          // Answer `workspace/configuration` pulls for section `mtmc` with the same JSON we push.
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) return result;
            return params.items.map((item, i) => (item.section === "mtmc" ? this.settings() : result[i]));
          },
        },
      },
    };
    const client = this.factory(serverOptions, clientOptions);
    client.onDidChangeState((event) => this.events.onStateChanged(event.newState === State.Running));
    client.onNotification(StatusNotification, (status: ServerStatus) => this.events.onStatus(status));
    client.onNotification(StepsChangedNotification, (params: { uri: string }) => this.events.onStepsChanged(params.uri));
    this.client = client;
    this.output.appendLine(`Starting: ${[python.command, ...python.args, ...SERVE_ARGS].join(" ")} (interpreter from ${python.source})`);
    try {
      await client.start();
    } catch (error) {
      this.client = undefined;
      this.haltedReason = "it could not start";
      this.reportStartFailure(python, error);
      return undefined;
    }
    await this.pushSettings();
    return client;
  }

  /** Send the current `mtmc` settings; the server applies them without a restart. */
  async pushSettings(): Promise<void> {
    if (!this.running) return;
    await this.client!.sendNotification("workspace/didChangeConfiguration", { settings: { mtmc: this.settings() } });
  }

  /** Run one of the server's commands (starting the server if needed). */
  async executeCommand<T = unknown>(command: string, args: unknown[]): Promise<T> {
    const client = await this.start();
    if (!client) {
      throw new Error(`the MTMC language server is not running (${this.haltedReason ?? "it could not start"}); see the "MTMC Triton" output, then run "MTMC: Restart Server"`);
    }
    return client.sendRequest<T>("workspace/executeCommand", { command, arguments: args });
  }

  async restart(): Promise<void> {
    this.haltedReason = undefined;
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client && client.state !== State.Stopped) {
      try {
        await client.stop();
      } catch (error) {
        this.output.appendLine(`Stopping the server failed: ${String(error)}`);
      }
    }
    this.events.onStateChanged(false);
  }

  private reportGiveUp(): void {
    void vscode.window
      .showErrorMessage(
        `MTMC: the language server crashed ${MAX_CRASHES + 1} times in 3 minutes and was not restarted. See the "MTMC Triton" output.`,
        "Restart Server",
        "Show Output",
      )
      .then((choice) => this.handleChoice(choice));
  }

  private reportStartFailure(python: PythonCommand, error: unknown): void {
    const shown = [python.command, ...python.args].join(" ");
    const install = `${shown} -m pip install mtmc-lsp`;
    this.output.appendLine(`Could not start the server with ${shown}: ${String(error)}`);
    void vscode.window
      .showErrorMessage(
        `MTMC: could not start the language server with "${shown}" (from ${python.source}). Is mtmc-lsp installed there (${install})? Set "mtmc.python" or pick another interpreter.`,
        "Open Settings",
        "Show Output",
        "Restart Server",
      )
      .then((choice) => this.handleChoice(choice));
  }

  private handleChoice(choice: string | undefined): void {
    if (choice === "Restart Server") void this.restart();
    else if (choice === "Show Output") this.output.show(true);
    else if (choice === "Open Settings") void vscode.commands.executeCommand("workbench.action.openSettings", "mtmc.python");
  }

  dispose(): void {
    this.recorder.dispose();
    void this.stop();
    this.output.dispose();
  }
}
