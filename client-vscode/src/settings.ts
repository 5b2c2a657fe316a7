// The `mtmc` settings section as the server reads it: the camelCase form of
// mtmc_lsp.settings.Settings (docs/ARCHITECTURE.md, "Editor protocol"), plus `trusted`.

/** The subset of vscode.WorkspaceConfiguration this module reads (keeps it testable). */
export interface ConfigurationReader {
  get<T>(section: string): T | undefined;
}

/** Top-level keys of the server's settings, each read as `mtmc.<key>`. */
export const SERVER_SETTING_KEYS = [
  "targetGpu",
  "policy",
  "policyModelPath",
  "policyAdapterPath",
  "policyEndpoint",
  "policyEndpointModel",
  "recordTrajectories",
  "compileDiagnostics",
  "diagnosticsDebounceMs",
  "allowPrecisionChanges",
  "coderEndpoint",
  "coderModel",
  "coderModelPath",
] as const;

/** Keys of the nested `verification` object, each read as `mtmc.verification.<key>`. */
export const VERIFICATION_SETTING_KEYS = ["enabled", "compileTimeoutS", "runTimeoutS", "seeds"] as const;

/** Client-only settings: they change how the server is started, so they are not sent to it. */
export const CLIENT_ONLY_SETTING_KEYS = ["python"] as const;

export interface ServerSettings {
  [key: string]: unknown;
  verification: Record<string, unknown>;
  /** False in an untrusted workspace: the server must not run user code (no compile, verify, optimize). */
  trusted: boolean;
}

/**
 * Build the JSON sent to the server from the `mtmc` configuration. Unset values are left out,
 * so the server's own defaults (mtmc_lsp.settings) apply.
 */
export function readServerSettings(config: ConfigurationReader, trusted: boolean): ServerSettings {
  const settings: ServerSettings = { verification: {}, trusted };
  for (const key of SERVER_SETTING_KEYS) {
    const value = config.get<unknown>(key);
    if (value !== undefined && value !== null) settings[key] = value;
  }
  for (const key of VERIFICATION_SETTING_KEYS) {
    const value = config.get<unknown>(`verification.${key}`);
    if (value !== undefined && value !== null) settings.verification[key] = value;
  }
  if (!trusted) {
    // Belt and braces next to `trusted`: verification runs the kernels, and a compile for the target
    // loads the file's module, so neither is asked of an untrusted workspace.
    settings.verification.enabled = false;
    settings.compileDiagnostics = false;
  }
  return settings;
}
