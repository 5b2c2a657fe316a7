// Drives VS Code (code-server) in headless Chromium through the MTMC flow, saving a screenshot per
// stage: diagnostic -> code action menu -> Refactor Preview -> applied -> step in the MTMC view.
// Run by run.sh; exits non-zero at the first stage that does not happen.
import { mkdirSync, writeFileSync } from "node:fs";
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
  // The server starts, analyses the file and publishes MTMC105 (num_warps=6): an error squiggle.
  await page.locator(".monaco-editor .squiggly-error").first().waitFor({ timeout: 120_000 });
  await runCommand("View: Toggle Problems");
  const problem = page.locator(".markers-panel .monaco-list-row", { hasText: "num_warps=6" }).first();
  await problem.waitFor({ timeout: 30_000 });
  return (await problem.innerText()).replace(/\s+/g, " ").slice(0, 160);
});

await stage("code-actions", async () => {
  // Put the cursor on the problem (clicking it in the Problems view reveals it), then Ctrl+.
  await page.locator(".markers-panel .monaco-list-row", { hasText: "num_warps=6" }).first().click();
  await page.waitForTimeout(500);
  await page.keyboard.press("Control+.");
  const menu = page.locator(".action-widget .monaco-list-row.action, .context-view .action-widget .action-list .action");
  await menu.first().waitFor({ timeout: 30_000 });
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
  // Annotated changes start unchecked: check every edit, then Apply.
  const unchecked = page.locator(".bulk-edit-panel .monaco-list-row .edit-checkbox:not(.checked), .bulk-edit-panel .monaco-list-row input[type=checkbox]:not(:checked)");
  for (let i = 0; i < 20 && (await unchecked.count()) > 0; i++) await unchecked.first().click();
  await page.locator(".bulk-edit-panel .monaco-button", { hasText: "Apply" }).first().click();
  await page.locator(".bulk-edit-panel").first().waitFor({ state: "hidden", timeout: 30_000 }).catch(() => undefined);
  await page.locator(".monaco-editor .squiggly-error").first().waitFor({ state: "detached", timeout: 60_000 }).catch(() => undefined);
  const errors = await page.locator(".monaco-editor .squiggly-error").count();
  return `error squiggles left: ${errors}`;
});

await stage("step-view", async () => {
  await runCommand("MTMC: Show Step History");
  const step = page.locator(".monaco-list-row", { hasText: /^\s*1\. / }).first();
  await page.locator("[id='workbench.view.extension.mtmc'] .monaco-list-row, .pane-body .monaco-list-row", { hasText: "1." }).first().waitFor({ timeout: 60_000 });
  return (await page.locator(".pane-body .monaco-list-row", { hasText: "1." }).first().innerText()).replace(/\s+/g, " ");
});

await stage("step-verified", async () => {
  // Verification runs in the background (the interpreter here: correctness, no timing).
  const row = page.locator(".pane-body .monaco-list-row", { hasText: /passed|failed|error/ }).first();
  await row.waitFor({ timeout: 300_000 });
  return (await row.innerText()).replace(/\s+/g, " ");
});

writeFileSync(join(args.out, "stages.json"), JSON.stringify(stages, null, 2));
await browser.close();
console.log(`[e2e] all ${stages.length} stages passed; screenshots in ${args.out}`);
