import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CLIENT_ONLY_SETTING_KEYS, readServerSettings, SERVER_SETTING_KEYS, VERIFICATION_SETTING_KEYS } from "../src/settings";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const properties: Record<string, { default: unknown }> = manifest.contributes.configuration.properties;

function reader(values: Record<string, unknown>) {
  return { get: <T>(key: string) => values[key] as T | undefined };
}

/** Field names and defaults of a dataclass in mtmc_lsp/settings.py, camelCased like the server does. */
function pythonFields(source: string, className: string): Map<string, string> {
  const body = source.split(new RegExp(`^class ${className}\\b.*$`, "m"))[1].split(/^\S/m)[0];
  const fields = new Map<string, string>();
  for (const match of body.matchAll(/^ {4}(\w+): [^=\n]+=\s*(.+)$/gm)) {
    const camel = match[1].replace(/_(\w)/g, (_, c: string) => c.toUpperCase());
    let value = match[2].trim();
    if (value.includes('"internal": True')) continue; // server-side bookkeeping, not a setting
    // field(default=X, metadata=...) -> X; field(default_factory=...) stays as it is (a nested section)
    const declared = /^field\(default=([^,)]+)/.exec(value);
    if (declared) value = declared[1].trim();
    fields.set(camel, value);
  }
  return fields;
}

/** The JSON value of a simple Python literal (True/False, a quoted string, a number). */
function fromPython(literal: string): unknown {
  if (literal === "True" || literal === "False") return literal === "True";
  const quoted = /^(["'])(.*)\1$/.exec(literal);
  if (quoted) return quoted[2];
  return Number(literal);
}

describe("readServerSettings", () => {
  it("nests verification and leaves unset keys to the server's defaults", () => {
    const settings = readServerSettings(
      reader({ targetGpu: "A100", policy: "heuristic", "verification.enabled": true, "verification.seeds": 5 }),
      true,
    );
    expect(settings).toEqual({ targetGpu: "A100", policy: "heuristic", verification: { enabled: true, seeds: 5 }, trusted: true });
  });

  it("never asks for verification or compilation in an untrusted workspace", () => {
    const settings = readServerSettings(reader({ "verification.enabled": true, compileDiagnostics: true }), false);
    expect(settings.trusted).toBe(false);
    expect(settings.verification.enabled).toBe(false);
    expect(settings.compileDiagnostics).toBe(false);
  });

  it("does not send client-only settings", () => {
    const settings = readServerSettings(reader({ python: "/usr/bin/python3", targetGpu: "H100" }), true);
    expect(settings).not.toHaveProperty("python");
  });
});

describe("contributed settings match mtmc_lsp/settings.py", () => {
  const source = readFileSync(new URL("../../mtmc_lsp/settings.py", import.meta.url), "utf8");
  const top = pythonFields(source, "Settings");
  top.delete("trusted"); // sent from VS Code's Workspace Trust (readServerSettings), not a contributed setting
  const verification = pythonFields(source, "VerificationSettings");

  it("contributes every server setting and nothing else", () => {
    const expected = [
      ...[...top.keys()].filter((k) => k !== "verification").map((k) => `mtmc.${k}`),
      ...[...verification.keys()].map((k) => `mtmc.verification.${k}`),
      ...CLIENT_ONLY_SETTING_KEYS.map((k) => `mtmc.${k}`),
    ].sort();
    expect(Object.keys(properties).sort()).toEqual(expected);
    expect([...SERVER_SETTING_KEYS].sort()).toEqual([...top.keys()].filter((k) => k !== "verification").sort());
    expect([...VERIFICATION_SETTING_KEYS].sort()).toEqual([...verification.keys()].sort());
  });

  it("uses the server's defaults", () => {
    for (const [key, value] of top) {
      if (key === "verification") continue;
      expect(properties[`mtmc.${key}`].default, key).toBe(fromPython(value));
    }
    for (const [key, value] of verification) {
      expect(properties[`mtmc.verification.${key}`].default, key).toBe(fromPython(value));
    }
  });
});
