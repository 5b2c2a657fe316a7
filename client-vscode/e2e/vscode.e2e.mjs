// Drives VS Code (code-server) in headless Chromium through the MTMC flow, saving a screenshot per
// stage: diagnostic -> code action menu -> Refactor Preview -> applied -> step in the MTMC view.
// Run by run.sh; exits non-zero at the first stage that does not happen.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    file: { type: "string" },
    out: { type: "string" },
    chromium: { type: "string" },
    playwright: { type: "string" },
    action: { type: "string", default: "" },
    "kernel-line": { type: "string", default: "acc += tl.dot(a, b)" },
  },
});
const { chromium } = await import(args.playwright);
mkdirSync(args.out, { recursive: true });

const browser = await chromium.launch({ executablePath: args.chromium, args: ["--no-sandbox", "--disable-gpu"] });
const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
const stages = [];
let stageNo = 0;

async function stage(name, fn) {
  const started = Date.now();
  stageNo += 1;
  const shot = join(args.out, `${String(stageNo).padStart(2, "0")}-${name}.png`);
  try {
    const note = await fn();
    await page.screenshot({ path: shot });
    stages.push({ stage: name, ok: true, seconds: (Date.now() - started) / 1000, screenshot: shot, note: note ?? null });
    console.log(`[e2e] ok   ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)${note ? `: ${note}` : ""}`);
  } catch (error) {
    await page.screenshot({ path: shot.replace(/\.png$/, "-FAILED.png") }).catch(() => undefined);
    stages.push({ stage: name, ok: false, seconds: (Date.now() - started) / 1000, error: String(error) });
    console.error(`[e2e] FAIL ${name}: ${error}`);
    writeFileSync(join(args.out, "stages.json"), JSON.stringify(stages, null, 2));
    await browser.close();
    process.exit(1);
  }
}

/** Run a command from the palette by its title. */
async function runCommand(title) {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await input.fill(`>${title}`);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first().waitFor({ timeout: 15_000 });
  await page.keyboard.press("Enter");
}

await stage("workbench", async () => {
  await page.goto(args.url);
  await page.locator(".monaco-workbench").waitFor({ timeout: 120_000 });
  // The explorer shows the workspace once the file service is up.
  await page.locator(".explorer-folders-view .monaco-list-row", { hasText: args.file }).waitFor({ timeout: 60_000 });
});

await stage("file-open", async () => {
  await page.locator(".explorer-folders-view .monaco-list-row", { hasText: args.file }).click();
  await page.locator(".monaco-editor .view-lines", { hasText: "matmul_kernel" }).first().waitFor({ timeout: 30_000 });
});

await stage("diagnostic", async () => {
  // The server starts, analyses the file and publishes MTMC105 (num_warps=6) at the launch line.
  await page.keyboard.press("Control+Shift+M"); // the Problems view
  const problem = page.locator(".markers-panel .monaco-list-row", { hasText: "num_warps=6" }).first();
  await problem.waitFor({ timeout: 120_000 });
  // Clicking the problem reveals its line: the error squiggle is drawn there.
  await problem.dblclick();
  await page.locator(".monaco-editor .squiggly-error").first().waitFor({ timeout: 30_000 });
  return (await problem.innerText()).replace(/\s+/g, " ").slice(0, 200);
});

await stage("quick-fix-menu", async () => {
  // The cursor is on the problem (double-clicked in the Problems view): Ctrl+. lists its quick fixes.
  await page.keyboard.press("Control+.");
  const fix = page.locator(".action-widget .monaco-list-row.action", { hasText: "Use num_warps=4" });
  await fix.first().waitFor({ timeout: 60_000 });
  return (await page.locator(".action-widget .monaco-list-row.action").allInnerTexts()).map((t) => t.trim()).join(" | ");
});

await stage("quick-fix-applied", async () => {
  await page.locator(".action-widget .monaco-list-row.action", { hasText: "Use num_warps=4" }).first().click();
  // The server re-analyses the new text and withdraws the diagnostic.
  await page.locator(".markers-panel .monaco-list-row", { hasText: "num_warps=6" }).first().waitFor({ state: "detached", timeout: 60_000 });
  await page.keyboard.press("Control+S");
});

await stage("code-actions", async () => {
  // Optimization steps are offered for the kernel under the cursor: go into its loop, then Ctrl+.
  const folder = new URL(args.url).searchParams.get("folder");
  const lines = readFileSync(join(folder, args.file), "utf8").split("\n");
  const line = lines.findIndex((l) => l.includes(args["kernel-line"])) + 1;
  if (line <= 0) throw new Error(`no line with ${args["kernel-line"]}`);
  await page.locator(".monaco-editor .view-lines").first().click();
  await page.keyboard.press("Control+G");
  await page.locator(".quick-input-widget input").fill(`:${line}:9`);
  await page.keyboard.press("Enter");
  const menu = page.locator(".action-widget .monaco-list-row.action");
  // Right after an edit the server may still be analysing the new version and answer nothing;
  // VS Code then shows no menu, so ask again (as a user would).
  for (let attempt = 1; ; attempt++) {
    await page.waitForTimeout(1000);
    await page.keyboard.press("Control+.");
    try {
      await menu.first().waitFor({ timeout: 10_000 });
      break;
    } catch (error) {
      if (attempt === 6) throw error;
      await page.keyboard.press("Escape");
    }
  }
  const titles = (await menu.allInnerTexts()).map((t) => t.trim()).filter(Boolean);
  return titles.join(" | ");
});

await stage("refactor-preview", async () => {
  const rows = page.locator(".action-widget .monaco-list-row.action");
  const wanted = args.action ? rows.filter({ hasText: args.action }) : rows;
  await wanted.first().click();
  // Annotated edits with needsConfirmation open VS Code's Refactor Preview instead of applying.
  const panel = page.locator(".bulk-edit-panel, .refactor-preview, [id='workbench.view.bulkEdit']");
  await panel.first().waitFor({ timeout: 60_000 });
  await page.locator(".bulk-edit-panel .monaco-list-row").first().waitFor({ timeout: 30_000 });
  return (await page.locator(".bulk-edit-panel .monaco-list-row").allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim()).join(" | ");
});

await stage("applied", async () => {
  // Annotated changes start unchecked in the preview: check every edit, then Apply.
  const unchecked = page.locator(".bulk-edit-panel .monaco-list-row .codicon-check:not(.checked), .bulk-edit-panel .monaco-list-row input[type=checkbox]:not(:checked), .bulk-edit-panel .monaco-list-row .monaco-custom-toggle:not(.checked)");
  for (let i = 0; i < 20 && (await unchecked.count()) > 0; i++) await unchecked.first().click();
  const path = join(new URL(args.url).searchParams.get("folder"), args.file);
  const before = readFileSync(path, "utf8");
  await page.locator(".bulk-edit-panel .monaco-button", { hasText: "Apply" }).first().click();
  // The edit lands in the buffer, and files.refactoring.autoSave writes it to disk.
  const deadline = Date.now() + 30_000;
  while (readFileSync(path, "utf8") === before) {
    if (Date.now() > deadline) throw new Error("the file did not change after Apply");
    await page.waitForTimeout(250);
  }
  const after = readFileSync(path, "utf8").split("\n");
  const changed = before.split("\n").filter((line, i) => after[i] !== line).length;
  return `${changed} line(s) changed on disk`;
});

await stage("step-view", async () => {
  await runCommand("MTMC: Show Step History");
  // The MTMC view lives in the side bar: kernels, then their numbered steps.
  await page.locator(".part.sidebar .monaco-list-row", { hasText: "matmul_kernel" }).first().waitFor({ timeout: 60_000 });
  const row = page.locator(".part.sidebar .monaco-list-row", { hasText: /\b1\. / }).first();
  await row.waitFor({ timeout: 60_000 });
  return (await row.innerText()).replace(/\s+/g, " ");
});

await stage("step-verified", async () => {
  // Verification runs in the background (the interpreter here: correctness, no timing).
  const row = page.locator(".part.sidebar .monaco-list-row", { hasText: /\b1\. .*(passed|failed|skipped|cancelled)/s }).first();
  await row.waitFor({ timeout: 300_000 });
  const text = (await row.innerText()).replace(/\s+/g, " ");
  if (!/passed/.test(text)) throw new Error(`the step did not pass verification: ${text}`);
  // The speedup chart (Show Step History opened it beside the editor) has the step's bar.
  await page.locator(".webview, iframe.webview").first().waitFor({ timeout: 10_000 });
  return text;
});

writeFileSync(join(args.out, "stages.json"), JSON.stringify(stages, null, 2));
await browser.close();
console.log(`[e2e] all ${stages.length} stages passed; screenshots in ${args.out}`);
