import { beforeEach, describe, expect, it } from "vitest";
import { CrashRestartHandler, MAX_CRASHES } from "../src/server";
import { activateExtension, flush, lastClient, resetAll, TRITON_SOURCE } from "./helpers";
import { CloseAction, LanguageClient } from "./mocks/languageclient";
import { changeConfiguration, EventEmitter, makeDocument, mock } from "./mocks/vscode";

beforeEach(resetAll);

describe("activation", () => {
  it("does not start the server for Python files without Triton", async () => {
    mock.documents.push(makeDocument("/ws/plain.py", "import numpy as np\nprint(np.ones(3))\n"));
    const { api } = await activateExtension({ openTriton: false });
    expect(LanguageClient.instances).toHaveLength(0);
    expect(api.server.running).toBe(false);
    expect(mock.treeViews[0].message).toMatch(/Open a Triton file/);
  });

  it("starts `python3 -I -m mtmc_lsp serve` over stdio once a Triton file is open", async () => {
    const { api } = await activateExtension();
    const client = lastClient();
    expect(client.serverOptions.command).toBe("python3");
    expect(client.serverOptions.args).toEqual(["-I", "-m", "mtmc_lsp", "serve"]);
    expect(client.serverOptions.transport).toBe(0);
    expect(client.serverOptions.options.cwd).toBe("/ws");
    expect(client.clientOptions.documentSelector).toContainEqual({ scheme: "file", language: "python" });
    expect(api.server.running).toBe(true);
    expect(mock.statusBarItems[0].visible).toBe(true);
  });

  it("starts when a Triton file is opened later, and only once", async () => {
    await activateExtension({ openTriton: false });
    mock.events.openDocument.fire(makeDocument("/ws/a.py", TRITON_SOURCE));
    mock.events.openDocument.fire(makeDocument("/ws/b.py", TRITON_SOURCE));
    await flush();
    expect(LanguageClient.instances).toHaveLength(1);
    expect(lastClient().state).toBe(2);
  });

  it("starts when `import triton` is typed into an open Python file", async () => {
    const document = makeDocument("/ws/a.py", "x = 1\n");
    mock.documents.push(document);
    await activateExtension({ openTriton: false });
    expect(LanguageClient.instances).toHaveLength(0);
    mock.events.changeDocument.fire({ document: makeDocument("/ws/a.py", "import triton\n") });
    await flush();
    expect(LanguageClient.instances).toHaveLength(1);
  });
});

describe("choosing the interpreter", () => {
  it("prefers the mtmc.python setting", async () => {
    mock.config["mtmc.python"] = "/opt/venv/bin/python";
    mock.extensions["ms-python.python"] = {
      isActive: true,
      exports: { settings: { getExecutionDetails: () => ({ execCommand: ["/other/python"] }) } },
    };
    await activateExtension();
    expect(lastClient().serverOptions.command).toBe("/opt/venv/bin/python");
  });

  it("uses the Python extension's execution details (keeping extra arguments)", async () => {
    mock.extensions["ms-python.python"] = {
      isActive: true,
      exports: { settings: { getExecutionDetails: () => ({ execCommand: ["conda", "run", "-n", "gpu", "python"] }) } },
    };
    await activateExtension();
    const client = lastClient();
    expect(client.serverOptions.command).toBe("conda");
    expect(client.serverOptions.args).toEqual(["run", "-n", "gpu", "python", "-I", "-m", "mtmc_lsp", "serve"]);
  });

  it("falls back to the environments API, activating the Python extension", async () => {
    let activated = false;
    mock.extensions["ms-python.python"] = {
      isActive: false,
      activate: async () => {
        activated = true;
        return {
          environments: {
            getActiveEnvironmentPath: () => ({ id: "venv", path: "/ws/.venv" }),
            resolveEnvironment: async () => ({ executable: { uri: { fsPath: "/ws/.venv/bin/python" } } }),
          },
        };
      },
    };
    await activateExtension();
    expect(activated).toBe(true);
    expect(lastClient().serverOptions.command).toBe("/ws/.venv/bin/python");
  });

  it("restarts with the new interpreter when the Python extension's selection changes", async () => {
    const changed = new EventEmitter<unknown>();
    let interpreter = "/ws/.venv/bin/python";
    mock.extensions["ms-python.python"] = {
      isActive: true,
      exports: {
        settings: { getExecutionDetails: () => ({ execCommand: [interpreter] }) },
        environments: { onDidChangeActiveEnvironmentPath: changed.event },
      },
    };
    await activateExtension();
    expect(lastClient().serverOptions.command).toBe("/ws/.venv/bin/python");
    interpreter = "/opt/conda/bin/python";
    changed.fire({});
    await flush();
    expect(LanguageClient.instances).toHaveLength(2);
    expect(lastClient().serverOptions.command).toBe("/opt/conda/bin/python");
    expect(mock.messages.at(-1)?.text).toMatch(/interpreter changed/);
  });

  it("restarts the server when mtmc.python changes", async () => {
    await activateExtension();
    const first = lastClient();
    changeConfiguration({ "mtmc.python": "/usr/local/bin/python3.12" });
    await flush();
    expect(first.state).toBe(1);
    expect(lastClient()).not.toBe(first);
    expect(lastClient().serverOptions.command).toBe("/usr/local/bin/python3.12");
  });

  it("explains a server that cannot start", async () => {
    LanguageClient.startError = new Error("No module named mtmc_lsp");
    const { api } = await activateExtension();
    expect(api.server.running).toBe(false);
    const error = mock.messages.find((m) => m.level === "error");
    expect(error?.text).toMatch(/could not start the language server with "python3".*pip install mtmc-lsp/);
    expect(error?.items).toContain("Open Settings");
  });
});

describe("a server that cannot run", () => {
  it("is not retried on every keystroke or editor switch, only by an explicit restart", async () => {
    LanguageClient.startError = new Error("No module named mtmc_lsp");
    const { api } = await activateExtension();
    const attempts = LanguageClient.instances.length;
    mock.events.changeDocument.fire({ document: makeDocument("/ws/a.py", TRITON_SOURCE) });
    mock.events.openDocument.fire(makeDocument("/ws/b.py", TRITON_SOURCE));
    await api.steps.refresh();
    await flush();
    expect(LanguageClient.instances.length).toBe(attempts);
    expect(mock.messages.filter((m) => m.level === "error")).toHaveLength(1);
    expect(api.steps.message).toMatch(/not running \(it could not start\).*Restart Server/);
    LanguageClient.startError = undefined;
    await mock.commands.get("mtmc.client.restartServer")!();
    await flush();
    expect(api.server.running).toBe(true);
  });

  it("stays down after crashing too often", async () => {
    const { api } = await activateExtension();
    const handler = lastClient().clientOptions.errorHandler as CrashRestartHandler;
    for (let i = 0; i <= MAX_CRASHES; i++) handler.closed();
    await lastClient().stop();
    expect(api.server.halted).toBe(true);
    const before = LanguageClient.instances.length;
    mock.events.openDocument.fire(makeDocument("/ws/c.py", TRITON_SOURCE));
    await flush();
    expect(LanguageClient.instances.length).toBe(before);
    expect(mock.messages.at(-1)).toMatchObject({ level: "error", items: ["Restart Server", "Show Output"] });
  });
});

describe("settings reach the server", () => {
  it("sends them at initialization and after every change, without a restart", async () => {
    mock.config["mtmc.targetGpu"] = "A100";
    await activateExtension();
    const client = lastClient();
    expect(client.clientOptions.initializationOptions).toEqual({
      mtmc: { targetGpu: "A100", verification: {}, trusted: true },
      trusted: true,
    });
    changeConfiguration({ "mtmc.targetGpu": "H200", "mtmc.verification.runTimeoutS": 30 });
    await flush();
    expect(LanguageClient.instances).toHaveLength(1);
    const pushed = client.notifications.filter((n) => n.method === "workspace/didChangeConfiguration").at(-1);
    expect(pushed?.params).toEqual({
      settings: { mtmc: { targetGpu: "H200", verification: { runTimeoutS: 30 }, trusted: true } },
    });
  });

  it("leaves the one didChangeConfiguration per change to the extension itself", async () => {
    await activateExtension();
    let forwarded = false;
    await lastClient().clientOptions.middleware.workspace.didChangeConfiguration(["mtmc"], async () => {
      forwarded = true;
    });
    expect(forwarded).toBe(false);
  });

  it("answers workspace/configuration pulls for `mtmc` with the same JSON", async () => {
    mock.config["mtmc.policy"] = "heuristic";
    await activateExtension();
    const middleware = lastClient().clientOptions.middleware.workspace.configuration;
    const result = await middleware(
      { items: [{ section: "mtmc" }, { section: "python" }] },
      {},
      async () => [{ stale: true }, { analysis: 1 }],
    );
    expect(result).toEqual([{ policy: "heuristic", verification: {}, trusted: true }, { analysis: 1 }]);
  });
});

describe("crashes", () => {
  it("restarts with a visible message, then gives up after too many crashes", () => {
    let now = 0;
    let gaveUp = false;
    const handler = new CrashRestartHandler(() => (gaveUp = true), () => now);
    for (let i = 1; i <= MAX_CRASHES; i++) {
      now += 1000;
      expect(handler.closed()).toEqual({ action: CloseAction.Restart, handled: true });
      expect(mock.messages.at(-1)?.text).toMatch(new RegExp(`stopped unexpectedly.*\\(${i} of ${MAX_CRASHES}`));
    }
    expect(handler.closed()).toEqual({ action: CloseAction.DoNotRestart, handled: true });
    expect(gaveUp).toBe(true);
  });

  it("forgets crashes older than the window", () => {
    let now = 0;
    const handler = new CrashRestartHandler(() => undefined, () => now);
    for (let i = 0; i < 20; i++) {
      now += 60 * 1000;
      expect(handler.closed().action).toBe(CloseAction.Restart);
    }
  });

  it("is the error handler the client uses", async () => {
    await activateExtension();
    expect(lastClient().clientOptions.errorHandler).toBeInstanceOf(CrashRestartHandler);
  });
});

describe("status bar", () => {
  it("shows target, model state and verification queue from mtmc/status", async () => {
    const { api } = await activateExtension();
    lastClient().emit("mtmc/status", { target: "H100", model: "loading", queue: 2 });
    expect(api.statusBar.text).toContain("H100");
    expect(api.statusBar.text).toContain("model loading");
    expect(api.statusBar.text).toContain("2 verifying");
    lastClient().emit("mtmc/status", { target: "A100", model: "ready", queue: 0 });
    expect(api.statusBar.text).toContain("A100");
    expect(api.statusBar.text).toContain("model ready");
    expect(api.statusBar.text).not.toContain("verifying");
    expect(mock.statusBarItems[0].command).toBe("mtmc.client.selectTarget");
  });

  it("says when the server is stopped", async () => {
    const { api } = await activateExtension();
    await api.server.stop();
    expect(api.statusBar.text).toContain("stopped");
  });
});

describe("workspace trust", () => {
  it("tells the server it is untrusted and skips the Python extension's interpreter", async () => {
    mock.trusted = false;
    mock.extensions["ms-python.python"] = {
      isActive: true,
      exports: { settings: { getExecutionDetails: () => ({ execCommand: ["/ws/.venv/bin/python"] }) } },
    };
    mock.config["mtmc.verification.enabled"] = true;
    const { api } = await activateExtension();
    const client = lastClient();
    expect(client.serverOptions.command).toBe("python3");
    expect(client.clientOptions.initializationOptions.trusted).toBe(false);
    expect(client.clientOptions.initializationOptions.mtmc.verification.enabled).toBe(false);
    expect(api.statusBar.text).toBe("$(sync~spin) MTMC: starting");
    client.emit("mtmc/status", { target: "H100", model: "off", queue: 0 });
    expect(api.statusBar.text).toContain("restricted");
  });

  it("stops the server's optimize/verify commands (code lenses, code actions) from running", async () => {
    mock.trusted = false;
    await activateExtension();
    const middleware = lastClient().clientOptions.middleware.executeCommand;
    const forwarded: string[] = [];
    const next = async (command: string) => {
      forwarded.push(command);
      return "ran";
    };
    expect(await middleware("mtmc.optimizeKernel", ["file:///ws/kernels/add.py", "add_kernel"], next)).toBeUndefined();
    expect(await middleware("mtmc.verifyKernel", ["file:///ws/kernels/add.py"], next)).toBeUndefined();
    expect(await middleware("mtmc.stepApplied", ["file:///ws/kernels/add.py", "token"], next)).toBe("ran");
    expect(forwarded).toEqual(["mtmc.stepApplied"]);
    expect(mock.messages.filter((m) => m.level === "warning").map((m) => m.text)).toEqual([
      expect.stringMatching(/^MTMC: Optimize Kernel runs your kernel code/),
      expect.stringMatching(/^MTMC: Verify Kernel runs your kernel code/),
    ]);
  });

  it("forwards them once trusted", async () => {
    await activateExtension();
    const middleware = lastClient().clientOptions.middleware.executeCommand;
    expect(await middleware("mtmc.optimizeKernel", [], async () => "ran")).toBe("ran");
  });

  it("restarts as trusted when the user grants trust", async () => {
    mock.trusted = false;
    await activateExtension();
    const first = lastClient();
    mock.trusted = true;
    mock.events.grantTrust.fire();
    await flush();
    expect(lastClient()).not.toBe(first);
    expect(lastClient().clientOptions.initializationOptions.trusted).toBe(true);
  });
});

describe("manifest", () => {
  it("declares limited support for untrusted workspaces and activates on Python", async () => {
    const { readFileSync } = await import("node:fs");
    const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    expect(manifest.activationEvents).toEqual(["onLanguage:python"]);
    expect(manifest.capabilities.untrustedWorkspaces.supported).toBe("limited");
    expect(manifest.capabilities.untrustedWorkspaces.restrictedConfigurations).toContain("mtmc.python");
    expect(manifest.main).toBe("./dist/extension.js");
  });
});
