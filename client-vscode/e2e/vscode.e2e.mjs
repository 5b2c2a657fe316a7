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
    // "trusted": the whole flow; "restricted": an untrusted workspace (Restricted Mode).
    scenario: { type: "string", default: "trusted" },
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

let stepTitle = ""; // the optimization step chosen in the code action menu

const filePath = () => join(new URL(args.url).searchParams.get("folder"), args.file);

/** The MTMC view's row of the chosen step (the view lives in the side bar: kernels, then steps). */
const stepRow = () => page.locator(".part.sidebar .monaco-list-row", { hasText: stepTitle }).first();

/** Wait until `predicate(text on disk)` holds. */
async function waitForFile(predicate, what, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate(readFileSync(filePath(), "utf8"))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await page.waitForTimeout(250);
  }
}

/** Put the cursor on the first line containing `lineText`, at `column` (a substring of it) or its indent. */
async function goTo(lineText, column) {
  const lines = readFileSync(filePath(), "utf8").split("\n");
  const index = lines.findIndex((l) => l.includes(lineText));
  if (index < 0) throw new Error(`no line with ${lineText}`);
  const character = (column ? lines[index].indexOf(column) : lines[index].search(/\S/)) + 1;
  await page.keyboard.press("Control+G"); // Go to Line works wherever the focus is
  await page.locator(".quick-input-widget input").fill(`:${index + 1}:${character}`);
  await page.keyboard.press("Enter");
}

/** Ctrl+. in the editor until the code action menu shows (right after an edit the server may answer
 * nothing while it analyses the new version; VS Code then shows no menu, so ask again as a user would). */
async function openCodeActions(hasText) {
  const rows = page.locator(".action-widget .monaco-list-row.action").filter({ visible: true, ...(hasText ? { hasText } : {}) });
  for (let attempt = 1; ; attempt++) {
    await page.waitForTimeout(1000);
    await page.keyboard.press("Control+.");
    try {
      await rows.first().waitFor({ timeout: 10_000 });
      return;
    } catch (error) {
      if (attempt === 6) throw error;
      await page.keyboard.press("Escape");
    }
  }
}

/** In the Refactor Preview: check every change (annotated changes start unchecked), then Apply. */
async function applyRefactorPreview() {
  const unchecked = page.locator(".bulk-edit-panel .monaco-list-row .monaco-custom-toggle:not(.checked), .bulk-edit-panel .monaco-list-row input[type=checkbox]:not(:checked)");
  for (let i = 0; i < 20 && (await unchecked.count()) > 0; i++) await unchecked.first().click();
  await page.locator(".bulk-edit-panel .monaco-button", { hasText: "Apply" }).first().click();
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

if (args.scenario === "restricted") {
  await stage("restricted-status", async () => {
    // The extension runs in Restricted Mode (capabilities.untrustedWorkspaces: limited) and says so.
    const item = page.locator(".statusbar-item", { hasText: /h100.*restricted/i }).first();
    await item.waitFor({ timeout: 30_000 });
    return (await item.innerText()).replace(/\s+/g, " ");
  });

  await stage("commands-hidden", async () => {
    // Optimize Kernel and Verify Kernel would run the workspace's code: not offered in the palette.
    await page.keyboard.press("F1");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    await input.fill(">MTMC:");
    const rows = page.locator(".quick-input-list .monaco-list-row");
    await rows.filter({ hasText: "Select Target GPU" }).first().waitFor({ timeout: 15_000 });
    const titles = (await rows.allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim());
    if (titles.some((t) => /Optimize Kernel|Verify Kernel/.test(t))) throw new Error(`offered in Restricted Mode: ${titles.join(" | ")}`);
    return titles.join(" | ");
  });
  await page.keyboard.press("Escape");

  await stage("lens-blocked", async () => {
    // The kernel's code lens runs the server's optimize command: refused here, with the reason.
    await goTo("import triton");
    const lens = page.locator(".monaco-editor .codelens-decoration a", { hasText: "matmul_kernel" }).first();
    await lens.waitFor({ timeout: 30_000 });
    await lens.click();
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "runs your kernel code" }).first();
    await toast.waitFor({ timeout: 15_000 });
    return (await toast.innerText()).replace(/\s+/g, " ").slice(0, 200);
  });

  await stage("fix-not-verified", async () => {
    // Edits still work, but nothing runs the workspace's code: the step is recorded unverified.
    await goTo("num_warps=6", "num_warps");
    await openCodeActions("Use num_warps=4");
    await page.keyboard.press("Enter");
    try {
      await page.locator(".bulk-edit-panel .monaco-list-row").first().waitFor({ timeout: 5_000 });
      await applyRefactorPreview();
    } catch {
      // Applied directly.
    }
    await page.keyboard.press("Control+S");
    await waitForFile((text) => text.includes("num_warps=4,"), "the quick fix on disk");
    stepTitle = "Use num_warps=4";
    await runCommand("MTMC: Show Step History");
    const row = stepRow();
    await row.waitFor({ timeout: 30_000 });
    await page.waitForTimeout(8_000); // time enough for a verification to start, were it allowed
    const text = (await row.innerText()).replace(/\s+/g, " ");
    if (/passed|failed|running|pending/.test(text)) throw new Error(`verification ran in Restricted Mode: ${text}`);
    return text;
  });
} else {
  await stage("quick-fix-menu", async () => {
    // The cursor is on the problem (double-clicked in the Problems view): Ctrl+. lists its quick fixes.
    await page.keyboard.press("Control+.");
    const fix = page.locator(".action-widget .monaco-list-row.action").filter({ visible: true, hasText: "Use num_warps=4" });
    await fix.first().waitFor({ timeout: 60_000 });
    return (await page.locator(".action-widget .monaco-list-row.action").filter({ visible: true }).allInnerTexts()).map((t) => t.trim()).join(" | ");
  });

  await stage("quick-fix-applied", async () => {
    // Keyboard, as a user would: the menu opens with its first (preferred) entry selected; Enter runs it.
    const first = (await page.locator(".action-widget .monaco-list-row.action").filter({ visible: true }).first().innerText()).trim();
    if (!first.startsWith("Use num_warps=4")) throw new Error(`unexpected first quick fix: ${first}`);
    await page.keyboard.press("Enter");
    // The server sends the fix as a reviewable step too: confirm it in the Refactor Preview when shown.
    const preview = page.locator(".bulk-edit-panel .monaco-list-row").first();
    let previewed = false;
    try {
      await preview.waitFor({ timeout: 5_000 });
      previewed = true;
      await applyRefactorPreview();
    } catch (error) {
      if (previewed) throw error;
    }
    await page.keyboard.press("Control+S");
    await waitForFile((text) => text.includes("num_warps=4,"), "the quick fix on disk");
    // The server withdraws the diagnostic for the new text.
    const problems = page.locator(".markers-panel .monaco-list-row", { hasText: "num_warps=6" });
    for (let stable = 0, i = 0; stable < 4; i++) {
      if (i > 240) throw new Error("the MTMC105 problem stayed after the fix");
      stable = (await problems.count()) === 0 ? stable + 1 : 0;
      await page.waitForTimeout(250);
    }
    return previewed ? "applied through the Refactor Preview" : "applied directly";
  });

  await stage("code-actions", async () => {
    // Optimization steps are offered for the kernel under the cursor: go into its loop, then Ctrl+.
    await goTo(args["kernel-line"]);
    await openCodeActions();
    const titles = (await page.locator(".action-widget .monaco-list-row.action").filter({ visible: true }).allInnerTexts())
      .map((t) => t.trim()).filter(Boolean);
    return titles.join(" | ");
  });

  await stage("refactor-preview", async () => {
    const rows = page.locator(".action-widget .monaco-list-row.action").filter({ visible: true });
    // The menu opens with the top-ranked step selected; --action picks another one by its title.
    const titles = (await rows.allInnerTexts()).map((t) => t.trim());
    const index = args.action ? titles.findIndex((t) => t.includes(args.action)) : 0;
    if (index < 0) throw new Error(`no code action matching ${args.action}`);
    stepTitle = titles[index];
    for (let i = 0; i < index; i++) await page.keyboard.press("ArrowDown");
    await page.keyboard.press("Enter");
    // Annotated edits with needsConfirmation open VS Code's Refactor Preview instead of applying.
    const panel = page.locator(".bulk-edit-panel, .refactor-preview, [id='workbench.view.bulkEdit']");
    await panel.first().waitFor({ timeout: 60_000 });
    await page.locator(".bulk-edit-panel .monaco-list-row").first().waitFor({ timeout: 30_000 });
    return (await page.locator(".bulk-edit-panel .monaco-list-row").allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim()).join(" | ");
  });

  await stage("applied", async () => {
    const before = readFileSync(filePath(), "utf8");
    await applyRefactorPreview();
    // The edit lands in the buffer, and files.refactoring.autoSave writes it to disk.
    await waitForFile((text) => text !== before, "the step on disk");
    const after = readFileSync(filePath(), "utf8").split("\n");
    const changed = before.split("\n").filter((line, i) => after[i] !== line).length;
    return `${changed} line(s) changed on disk`;
  });

  await stage("step-view", async () => {
    await runCommand("MTMC: Show Step History");
    // The MTMC view lives in the side bar: kernels, then their numbered steps.
    await page.locator(".part.sidebar .monaco-list-row", { hasText: "matmul_kernel" }).first().waitFor({ timeout: 60_000 });
    const row = stepRow();
    await row.waitFor({ timeout: 60_000 });
    return (await row.innerText()).replace(/\s+/g, " ");
  });

  await stage("step-verified", async () => {
    // Verification runs in the background (the interpreter here: correctness, no timing).
    const row = stepRow().filter({ hasText: /passed|failed|skipped|cancelled/ });
    await row.waitFor({ timeout: 300_000 });
    const text = (await row.innerText()).replace(/\s+/g, " ");
    if (!/passed/.test(text)) throw new Error(`the step did not pass verification: ${text}`);
    // The speedup chart (Show Step History opened it beside the editor) has the step's bar.
    await page.locator(".webview, iframe.webview").first().waitFor({ timeout: 10_000 });
    return text;
  });

  await stage("step-diff", async () => {
    // Clicking a step opens its before/after diff.
    await stepRow().click();
    const tab = page.locator(".tabs-container .tab", { hasText: stepTitle }).first();
    await tab.waitFor({ timeout: 30_000 });
    await page.locator(".monaco-diff-editor").first().waitFor({ timeout: 30_000 });
    return (await tab.innerText()).trim();
  });

  await stage("select-target", async () => {
    // The status bar item opens the target pick (the server's mtmc.listTargets); the choice reaches
    // the server (mtmc.selectTarget + the saved mtmc.targetGpu) and comes back in mtmc/status.
    await page.locator(".statusbar-item", { hasText: /h100.*model/i }).first().click();
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    await input.fill("A100");
    await page.locator(".quick-input-list .monaco-list-row", { hasText: "A100" }).first().waitFor({ timeout: 15_000 });
    const offered = (await page.locator(".quick-input-list .monaco-list-row").allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim());
    await page.keyboard.press("Enter");
    await page.locator(".statusbar-item", { hasText: /a100.*model/i }).first().waitFor({ timeout: 30_000 });
    return offered.join(" | ").slice(0, 200);
  });

  await stage("step-accepted", async () => {
    // The inline Accept button of an applied step.
    const row = stepRow();
    await row.hover();
    await row.locator(".action-label.codicon-check").click();
    const accepted = stepRow().filter({ hasText: "accepted" });
    await accepted.waitFor({ timeout: 30_000 });
    return (await accepted.innerText()).replace(/\s+/g, " ");
  });

  await stage("optimize-kernel", async () => {
    // The MTMC loop (propose, apply, verify, keep) runs in the server; each kept step then comes back
    // as a reviewable edit: confirm each one in the Refactor Preview until the outcome is reported.
    await goTo(args["kernel-line"]);
    await runCommand("MTMC: Optimize Kernel");
    const outcome = page.locator(".notifications-toasts .notification-toast", { hasText: /applied for review|failed/ }).first();
    const preview = page.locator(".bulk-edit-panel .monaco-list-row").first();
    let reviewed = 0;
    const deadline = Date.now() + 400_000;
    while (!(await outcome.isVisible())) {
      if (Date.now() > deadline) throw new Error(`no outcome after ${reviewed} reviewed step(s)`);
      if (await preview.isVisible()) {
        await applyRefactorPreview();
        reviewed += 1;
        await preview.waitFor({ state: "hidden", timeout: 30_000 }).catch(() => undefined);
      }
      await page.waitForTimeout(500);
    }
    const text = (await outcome.innerText()).replace(/\s+/g, " ");
    if (/failed/.test(text)) throw new Error(text);
    return `${reviewed} step(s) reviewed; ${text}`;
  });
}

writeFileSync(join(args.out, "stages.json"), JSON.stringify(stages, null, 2));
await browser.close();
console.log(`[e2e] all ${stages.length} stages passed; screenshots in ${args.out}`);
