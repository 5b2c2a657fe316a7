// A fake `vscode-languageclient/node`: records what the extension sends and lets tests answer requests
// and emit server notifications. Aliased in vitest.config.mts.

export enum State { Stopped = 1, Running = 2, Starting = 3 }
export enum CloseAction { DoNotRestart = 1, Restart = 2 }
export enum ErrorAction { Continue = 1, Shutdown = 2 }
export enum TransportKind { stdio = 0, ipc = 1, pipe = 2, socket = 3 }

type RequestHandler = (method: string, params: any) => unknown;

export class LanguageClient {
  static instances: LanguageClient[] = [];
  /** Answers every client's requests; tests replace it. */
  static requestHandler: RequestHandler = () => null;
  /** When set, start() rejects with this error (the server could not start). */
  static startError: Error | undefined;

  state = State.Stopped;
  readonly requests: { method: string; params: any }[] = [];
  readonly notifications: { method: string; params: any }[] = [];
  private readonly notificationHandlers = new Map<string, (params: any) => void>();
  private readonly stateListeners: ((e: { oldState: State; newState: State }) => void)[] = [];

  constructor(readonly id: string, readonly name: string, readonly serverOptions: any, readonly clientOptions: any) {
    LanguageClient.instances.push(this);
  }

  static reset(): void {
    LanguageClient.instances = [];
    LanguageClient.requestHandler = () => null;
    LanguageClient.startError = undefined;
  }

  private setState(newState: State): void {
    const oldState = this.state;
    this.state = newState;
    for (const listener of this.stateListeners) listener({ oldState, newState });
  }

  onDidChangeState(listener: (e: { oldState: State; newState: State }) => void) {
    this.stateListeners.push(listener);
    return { dispose() {} };
  }

  onNotification(method: string, handler: (params: any) => void) {
    this.notificationHandlers.set(method, handler);
    return { dispose() {} };
  }

  /** Deliver a notification from the "server". */
  emit(method: string, params: unknown): void {
    this.notificationHandlers.get(method)?.(params);
  }

  async start(): Promise<void> {
    this.setState(State.Starting);
    if (LanguageClient.startError) {
      this.setState(State.Stopped);
      throw LanguageClient.startError;
    }
    this.setState(State.Running);
  }

  async stop(): Promise<void> {
    this.setState(State.Stopped);
  }

  async sendRequest(method: string, params: any): Promise<unknown> {
    this.requests.push({ method, params });
    return LanguageClient.requestHandler(method, params);
  }

  async sendNotification(method: string, params: any): Promise<void> {
    this.notifications.push({ method, params });
  }

  /** The server commands sent through workspace/executeCommand, as [command, ...arguments]. */
  get executedCommands(): unknown[][] {
    return this.requests
      .filter((r) => r.method === "workspace/executeCommand")
      .map((r) => [r.params.command, ...(r.params.arguments ?? [])]);
  }
}
