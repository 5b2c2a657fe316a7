// Which Python runs `mtmc serve`: the `mtmc.python` setting, else the interpreter chosen in the
// Python extension (through its API), else `python3` from PATH.
import * as vscode from "vscode";

export interface PythonCommand {
  /** The executable and any arguments that must precede `-m` (e.g. `conda run -n env python`). */
  command: string;
  args: string[];
  /** Where the choice came from, for messages. */
  source: "setting" | "python-extension" | "default";
}

const PYTHON_EXTENSION_ID = "ms-python.python";
const PYTHON_API_TIMEOUT_MS = 5000;

/**
 * The arguments after the interpreter that start the language server over stdio. `-I` (isolated):
 * the working directory is the workspace folder, and without it Python would put that folder first
 * on `sys.path`, so a cloned repository carrying `mtmc_lsp/` or `json.py` would run its code before
 * any trust. `-I` works on every Python we support (`-P` needs 3.11); it also ignores `PYTHON*`
 * variables and the user's site-packages, so mtmc-lsp must be installed in the interpreter's environment.
 */
export const SERVE_ARGS = ["-I", "-m", "mtmc_lsp", "serve"];

function withTimeout<T>(promise: PromiseLike<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    Promise.resolve(promise).then(
      (value) => { clearTimeout(timer); resolve(value); },
      () => { clearTimeout(timer); resolve(undefined); },
    );
  });
}

/** The Python extension's exported API, activating it if needed; undefined when absent or failing. */
async function pythonExtensionApi(): Promise<any | undefined> {
  const extension = vscode.extensions.getExtension(PYTHON_EXTENSION_ID);
  if (!extension) return undefined;
  if (extension.isActive) return extension.exports;
  return withTimeout(extension.activate(), PYTHON_API_TIMEOUT_MS);
}

/** Ask the Python extension for the interpreter of `resource`: execution details first, then environments. */
async function interpreterFromPythonExtension(resource: vscode.Uri | undefined): Promise<string[] | undefined> {
  let api: any;
  try {
    api = await pythonExtensionApi();
  } catch {
    return undefined;
  }
  if (!api) return undefined;
  try {
    const details = api.settings?.getExecutionDetails?.(resource);
    const execCommand: unknown = details?.execCommand;
    if (Array.isArray(execCommand) && execCommand.length > 0 && execCommand.every((part) => typeof part === "string")) {
      return execCommand as string[];
    }
  } catch {
    // Fall through to the environments API.
  }
  try {
    const environments = api.environments;
    const envPath = environments?.getActiveEnvironmentPath?.(resource);
    if (envPath) {
      const resolved = await withTimeout(environments.resolveEnvironment(envPath), PYTHON_API_TIMEOUT_MS) as any;
      const executable: string | undefined = resolved?.executable?.uri?.fsPath ?? envPath.path;
      if (executable) return [executable];
    }
  } catch {
    // No usable API: the default applies.
  }
  return undefined;
}

/**
 * Resolve the interpreter. In an untrusted workspace the Python extension's choice is skipped: it is
 * often the workspace's own virtual environment, and running it would run the workspace's code.
 * (`mtmc.python` is a restricted setting, so VS Code only gives us the user's own value there.)
 */
export async function resolvePython(resource: vscode.Uri | undefined, trusted: boolean): Promise<PythonCommand> {
  const configured = vscode.workspace.getConfiguration("mtmc", resource).get<string>("python")?.trim();
  if (configured) return { command: configured, args: [], source: "setting" };
  if (trusted) {
    const fromExtension = await interpreterFromPythonExtension(resource);
    if (fromExtension) return { command: fromExtension[0], args: fromExtension.slice(1), source: "python-extension" };
  }
  return { command: "python3", args: [], source: "default" };
}

/** Call `listener` when the Python extension's selected interpreter changes (no-op without it). */
export async function onPythonInterpreterChanged(listener: () => void): Promise<vscode.Disposable | undefined> {
  let api: any;
  try {
    api = await pythonExtensionApi();
  } catch {
    return undefined;
  }
  const event = api?.environments?.onDidChangeActiveEnvironmentPath ?? api?.settings?.onDidChangeExecutionDetails;
  if (typeof event !== "function") return undefined;
  return event(() => listener());
}
