// Entry point: activates on Python files, starts `mtmc serve` once a file uses Triton, and wires the
// status bar, the step view, the speedup chart and the commands to the server.
import * as vscode from "vscode";
import { ClientCommands, isPythonSource, registerCommands } from "./commands";
import { parseStepHistory, ServerCommands } from "./protocol";
import { onPythonInterpreterChanged } from "./python";
import { ClientFactory, MtmcServer } from "./server";
import { SpeedupChartPanel } from "./speedupChart";
import { StepContentProvider, STEP_SCHEME } from "./stepDiff";
import { StepTreeProvider } from "./stepTree";
import { StatusBar } from "./statusBar";
import { usesTriton } from "./triton";

export const STEP_VIEW_ID = "mtmc.steps";

/** What activate() returns: handles for tests and for other extensions. */
export interface MtmcExtensionApi {
  server: MtmcServer;
  steps: StepTreeProvider;
  statusBar: StatusBar;
  /** Start the server if `document` is a Python file that uses Triton; true when it did or already runs. */
  considerDocument(document: vscode.TextDocument): Promise<boolean>;
  /** Settles once the documents open at activation have been considered. */
  ready: Promise<void>;
}

export async function activate(context: vscode.ExtensionContext, factory?: ClientFactory): Promise<MtmcExtensionApi> {
  const isTrusted = () => vscode.workspace.isTrusted;
  const statusBar = new StatusBar(isTrusted, ClientCommands.selectTarget);
  const stepContents = new StepContentProvider();
  const chart = new SpeedupChartPanel();
  let server: MtmcServer;
  const steps = new StepTreeProvider(async (uri) =>
    parseStepHistory(await server.executeCommand(ServerCommands.stepHistory, [uri])),
  );
  server = new MtmcServer(
    {
      onStatus: (status) => statusBar.setStatus(status),
      onStepsChanged: (uri) => void steps.onStepsChanged(uri),
      onStateChanged: (running) => {
        statusBar.setRunning(running);
        void vscode.commands.executeCommand("setContext", "mtmc.serverRunning", running);
      },
    },
    isTrusted,
    factory,
  );

  const treeView = vscode.window.createTreeView(STEP_VIEW_ID, { treeDataProvider: steps, showCollapseAll: true });
  treeView.message = steps.message;
  context.subscriptions.push(
    statusBar,
    server,
    steps,
    chart,
    treeView,
    steps.onDidChangeTreeData(() => {
      treeView.message = steps.message;
      if (steps.currentDocument) chart.update(steps.currentDocument, steps.currentSteps);
    }),
    vscode.workspace.registerTextDocumentContentProvider(STEP_SCHEME, stepContents),
    ...registerCommands({
      executeServerCommand: (command, args) => server.executeCommand(command, args),
      restartServer: () => server.restart(),
      isTrusted,
      steps,
      stepContents,
      chart,
      stepViewId: STEP_VIEW_ID,
    }),
  );

  const considerDocument = async (document: vscode.TextDocument): Promise<boolean> => {
    if (server.halted || !isPythonSource(document) || !usesTriton(document.getText())) return false;
    statusBar.show();
    return (await server.start()) !== undefined;
  };

  const followEditor = (editor: vscode.TextEditor | undefined) => {
    // Only a Python source editor changes the view: opening a step's diff must not empty it.
    if (!editor || !isPythonSource(editor.document)) return;
    const uri = usesTriton(editor.document.getText()) ? editor.document.uri.toString() : undefined;
    if (uri !== steps.currentDocument) void steps.setDocument(uri);
  };

  context.subscriptions.push(
    vscode.workspace.onDidOpenTextDocument((document) => void considerDocument(document)),
    vscode.workspace.onDidChangeTextDocument((event) => {
      if (!server.running && !server.halted) void considerDocument(event.document);
    }),
    vscode.window.onDidChangeActiveTextEditor(followEditor),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration("mtmc.python")) {
        void server.restart();
      } else if (event.affectsConfiguration("mtmc")) {
        void server.pushSettings();
        statusBar.render();
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => {
      statusBar.render();
      // Restart: trusted, the interpreter may now come from the Python extension, and the server
      // may run user code from the start.
      void server.restart();
    }),
  );

  void onPythonInterpreterChanged(() => {
    if (server.running && server.interpreter?.source === "python-extension") {
      void vscode.window.showInformationMessage("MTMC: the Python interpreter changed; restarting the language server with it.");
      void server.restart();
    }
  }).then((disposable) => disposable && context.subscriptions.push(disposable));

  followEditor(vscode.window.activeTextEditor);
  // Not awaited: activation must not wait for Python to start.
  const ready = (async () => {
    for (const document of vscode.workspace.textDocuments) {
      if (await considerDocument(document)) return;
    }
  })();
  activeServer = server;
  return { server, steps, statusBar, considerDocument, ready };
}

let activeServer: MtmcServer | undefined;

/** Stop the server and wait for it, so no Python process outlives the window. */
export async function deactivate(): Promise<void> {
  await activeServer?.stop();
  activeServer = undefined;
}
