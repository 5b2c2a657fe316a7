// A small stand-in for the `vscode` module: the API surface the extension uses, with state that tests
// inspect and drive through `mock`. Aliased as "vscode" in vitest.config.mts.

type Listener<T> = (value: T) => unknown;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  event = (listener: Listener<T>) => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };
  fire(value: T): void {
    for (const listener of [...this.listeners]) listener(value);
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class Disposable {
  constructor(private readonly onDispose: () => void = () => undefined) {}
  dispose(): void {
    this.onDispose();
  }
}

export class Uri {
  private constructor(readonly scheme: string, readonly path: string, readonly query = "") {}
  static parse(value: string): Uri {
    const match = /^([a-zA-Z][\w+.-]*):(?:\/\/[^/]*)?([^?#]*)(?:\?([^#]*))?/.exec(value);
    if (!match) throw new Error(`bad uri ${value}`);
    return new Uri(match[1], match[2], match[3] ?? "");
  }
  static file(path: string): Uri {
    return new Uri("file", path);
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return this.scheme === "file" ? `file://${this.path}` : `${this.scheme}:${this.path}${this.query ? `?${this.query}` : ""}`;
  }
}

export enum TreeItemCollapsibleState { None = 0, Collapsed = 1, Expanded = 2 }
export enum StatusBarAlignment { Left = 1, Right = 2 }
export enum ConfigurationTarget { Global = 1, Workspace = 2, WorkspaceFolder = 3 }
export enum ProgressLocation { SourceControl = 1, Window = 10, Notification = 15 }
export enum ViewColumn { Active = -1, Beside = -2, One = 1 }

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class ThemeIcon {
  constructor(readonly id: string, readonly color?: ThemeColor) {}
}

export class TreeItem {
  description?: string;
  tooltip?: string;
  iconPath?: ThemeIcon;
  contextValue?: string;
  id?: string;
  command?: { command: string; title: string; arguments?: unknown[] };
  constructor(readonly label: string, readonly collapsibleState: TreeItemCollapsibleState) {}
}

export interface MockDocument {
  uri: Uri;
  languageId: string;
  version: number;
  getText(): string;
}

export function makeDocument(path: string, text: string, languageId = "python", version = 1): MockDocument {
  return { uri: Uri.file(path), languageId, version, getText: () => text };
}

export function makeEditor(document: MockDocument, line = 0) {
  return { document, selection: { active: { line, character: 0 } } };
}

interface Message {
  level: "info" | "warning" | "error";
  text: string;
  items: string[];
}

function freshState() {
  return {
    config: {} as Record<string, unknown>,
    trusted: true,
    documents: [] as MockDocument[],
    activeEditor: undefined as ReturnType<typeof makeEditor> | undefined,
    workspaceFolders: [{ uri: Uri.file("/ws"), name: "ws", index: 0 }] as { uri: Uri; name: string; index: number }[] | undefined,
    commands: new Map<string, (...args: any[]) => unknown>(),
    executed: [] as unknown[][],
    messages: [] as Message[],
    /** Which button a shown message "clicks" (undefined: dismissed). */
    messageChoice: undefined as string | undefined,
    /** Which quick pick item is chosen (undefined: cancelled). */
    pickChoice: (items: any[]) => items[0] as any,
    quickPicks: [] as any[][],
    /** What an input box "types" (undefined: dismissed with Escape); given the box's options. */
    inputValue: (_options: any) => undefined as string | undefined,
    inputBoxes: [] as any[],
    statusBarItems: [] as any[],
    treeViews: [] as any[],
    webviewPanels: [] as any[],
    contentProviders: new Map<string, any>(),
    extensions: {} as Record<string, any>,
    configUpdates: [] as { key: string; value: unknown; target: unknown }[],
    events: {
      openDocument: new EventEmitter<MockDocument>(),
      changeDocument: new EventEmitter<{ document: MockDocument }>(),
      changeActiveEditor: new EventEmitter<ReturnType<typeof makeEditor> | undefined>(),
      changeConfiguration: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),
      grantTrust: new EventEmitter<void>(),
    },
  };
}

export const mock = freshState();

/** Reset all state between tests. */
export function resetMock(): void {
  Object.assign(mock, freshState());
}

/** Change settings the way the Settings UI does: store, then fire the change event. */
export function changeConfiguration(values: Record<string, unknown>): void {
  Object.assign(mock.config, values);
  const keys = Object.keys(values);
  mock.events.changeConfiguration.fire({
    affectsConfiguration: (section: string) => keys.some((key) => key === section || key.startsWith(`${section}.`)),
  });
}

function configuration(section: string) {
  return {
    get<T>(key: string): T | undefined {
      return mock.config[`${section}.${key}`] as T | undefined;
    },
    async update(key: string, value: unknown, target: unknown) {
      mock.configUpdates.push({ key: `${section}.${key}`, value, target });
      changeConfiguration({ [`${section}.${key}`]: value });
    },
  };
}

function showMessage(level: Message["level"]) {
  return (text: string, ...items: string[]) => {
    mock.messages.push({ level, text, items });
    return Promise.resolve(mock.messageChoice !== undefined && items.includes(mock.messageChoice) ? mock.messageChoice : undefined);
  };
}

export const workspace = {
  getConfiguration: (section: string) => configuration(section),
  get isTrusted() {
    return mock.trusted;
  },
  get textDocuments() {
    return mock.documents;
  },
  get workspaceFolders() {
    return mock.workspaceFolders;
  },
  onDidChangeConfiguration: (l: Listener<any>) => mock.events.changeConfiguration.event(l),
  onDidOpenTextDocument: (l: Listener<MockDocument>) => mock.events.openDocument.event(l),
  onDidChangeTextDocument: (l: Listener<any>) => mock.events.changeDocument.event(l),
  onDidGrantWorkspaceTrust: (l: Listener<void>) => mock.events.grantTrust.event(l),
  registerTextDocumentContentProvider(scheme: string, provider: unknown) {
    mock.contentProviders.set(scheme, provider);
    return new Disposable(() => mock.contentProviders.delete(scheme));
  },
};

export const window = {
  get activeTextEditor() {
    return mock.activeEditor;
  },
  onDidChangeActiveTextEditor: (l: Listener<any>) => mock.events.changeActiveEditor.event(l),
  showInformationMessage: showMessage("info"),
  showWarningMessage: showMessage("warning"),
  showErrorMessage: showMessage("error"),
  async showQuickPick(items: any[] | Promise<any[]>) {
    const list = await items;
    mock.quickPicks.push(list);
    return mock.pickChoice(list);
  },
  async showInputBox(options: any) {
    mock.inputBoxes.push(options);
    return mock.inputValue(options);
  },
  async withProgress(_options: unknown, task: (progress: unknown, token: unknown) => Promise<unknown>) {
    return task({ report() {} }, { isCancellationRequested: false });
  },
  createStatusBarItem(id: string, alignment: StatusBarAlignment, priority: number) {
    const item = { id, alignment, priority, text: "", tooltip: "", command: undefined, name: "", visible: false,
      show() { item.visible = true; }, hide() { item.visible = false; }, dispose() {} };
    mock.statusBarItems.push(item);
    return item;
  },
  createTreeView(id: string, options: { treeDataProvider: any }) {
    const view = { id, ...options, message: undefined as string | undefined, dispose() {} };
    mock.treeViews.push(view);
    return view;
  },
  createOutputChannel(name: string) {
    const lines: string[] = [];
    return { name, lines, appendLine: (line: string) => lines.push(line), append: (t: string) => lines.push(t),
      show() {}, clear() {}, replace() {}, hide() {}, dispose() {} };
  },
  createWebviewPanel(viewType: string, title: string, column: unknown, options: unknown) {
    const disposed = new EventEmitter<void>();
    const panel = { viewType, title, column, options, webview: { html: "" }, revealed: 0,
      reveal() { panel.revealed++; }, onDidDispose: disposed.event, dispose() { disposed.fire(); } };
    mock.webviewPanels.push(panel);
    return panel;
  },
};

export const commands = {
  registerCommand(id: string, handler: (...args: any[]) => unknown) {
    if (mock.commands.has(id)) throw new Error(`command '${id}' already exists`);
    mock.commands.set(id, handler);
    return new Disposable(() => mock.commands.delete(id));
  },
  async executeCommand(id: string, ...args: unknown[]) {
    mock.executed.push([id, ...args]);
    const handler = mock.commands.get(id);
    return handler ? handler(...args) : undefined;
  },
};

export const extensions = {
  getExtension: (id: string) => mock.extensions[id],
};
