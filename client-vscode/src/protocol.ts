// The editor protocol between this extension and `mtmc serve` (docs/ARCHITECTURE.md).

/** Commands the server executes (`workspace/executeCommand`). */
export const ServerCommands = {
  optimizeKernel: "mtmc.optimizeKernel",
  verifyKernel: "mtmc.verifyKernel",
  acceptStep: "mtmc.acceptStep",
  rejectStep: "mtmc.rejectStep",
  stepHistory: "mtmc.stepHistory",
  listTargets: "mtmc.listTargets",
  applyCandidate: "mtmc.applyCandidate",
  llmStep: "mtmc.llmStep",
} as const;

export const StatusNotification = "mtmc/status";
export const StepsChangedNotification = "mtmc/stepsChanged";

export type ModelState = "not loaded" | "loading" | "ready" | "off" | string;

export interface ServerStatus {
  target: string;
  model: ModelState;
  queue: number;
}

export interface TargetInfo {
  key: string;
  name: string;
  summary: string;
}

export type StepStatus = "applied" | "accepted" | "rejected" | string;

/** One optimization step as the client shows it (normalised from the server's step JSON). */
export interface Step {
  id: string;
  /** 1-based number of the step in its document, as the server counts them. */
  index: number;
  kernel: string;
  title: string;
  status: StepStatus;
  textBefore?: string;
  textAfter?: string;
  verification?: StepVerification;
}

export interface StepVerification {
  /** "passed" | "failed" | "pending" | "running" | "skipped" ... as the server reports it. */
  state: string;
  mode?: string;
  message?: string;
  /** Time of the kernel before and after this step, in milliseconds (GPU only; never estimated). */
  beforeMs?: number;
  afterMs?: number;
  /** before / after: above 1 is faster; absent when not measured or not believed. */
  speedup?: number;
  /** False when the verifier did not believe a measured speedup (its recheck disagreed). */
  speedBelieved?: boolean;
}

function asNumber(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

function asString(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function firstNumber(obj: Record<string, unknown>, keys: string[]): number | undefined {
  for (const key of keys) {
    const value = asNumber(obj[key]);
    if (value !== undefined) return value;
  }
  return undefined;
}

/** Read the verification part of a step, accepting the field spellings a JSON-able report may use. */
export function parseVerification(raw: unknown): StepVerification | undefined {
  if (!raw || typeof raw !== "object") return undefined;
  const report = raw as Record<string, unknown>;
  const speed = (report.speed && typeof report.speed === "object" ? report.speed : {}) as Record<string, unknown>;
  const beforeKeys = ["beforeMs", "baselineMs", "oldMs", "before_ms", "baseline_ms", "old_ms"];
  const afterKeys = ["afterMs", "candidateMs", "newMs", "timeMs", "after_ms", "candidate_ms", "new_ms", "time_ms"];
  const beforeMs = firstNumber(report, beforeKeys) ?? firstNumber(speed, beforeKeys);
  const afterMs = firstNumber(report, afterKeys) ?? firstNumber(speed, afterKeys);
  // The verifier rechecks suspicious (>10x) speedups; one it does not believe is never shown as a speedup.
  const believed = speed.believed !== false && report.believed !== false;
  let speedup = believed ? firstNumber(report, ["speedup"]) ?? firstNumber(speed, ["speedup"]) : undefined;
  if (speedup === undefined && believed && beforeMs !== undefined && afterMs !== undefined && afterMs > 0) {
    speedup = beforeMs / afterMs;
  }
  let state = asString(report.state) ?? asString(report.verdict) ?? asString(report.status);
  if (state === undefined) {
    const ok = report.ok ?? report.passed ?? report.correct;
    state = ok === true ? "passed" : ok === false ? "failed" : "unknown";
  }
  return {
    state,
    mode: asString(report.mode),
    message: asString(report.message) ?? asString(report.summary) ?? asString(report.error),
    beforeMs,
    afterMs,
    speedup,
    speedBelieved: believed,
  };
}

/** Normalise one step from `mtmc.stepHistory`; undefined when it has no id. */
export function parseStep(raw: unknown, position: number): Step | undefined {
  if (!raw || typeof raw !== "object") return undefined;
  const step = raw as Record<string, unknown>;
  const id = step.id ?? step.stepId;
  if (typeof id !== "string" && typeof id !== "number") return undefined;
  const candidate = (step.candidate && typeof step.candidate === "object" ? step.candidate : {}) as Record<string, unknown>;
  return {
    id: String(id),
    index: asNumber(step.index) ?? position + 1,
    kernel: asString(step.kernel) ?? asString(candidate.kernel) ?? "(file)",
    title: asString(step.title) ?? asString(candidate.title) ?? asString(step.summary) ?? `Step ${String(id)}`,
    status: asString(step.status) ?? "applied",
    textBefore: asString(step.textBefore) ?? asString(step.before) ?? asString(step.text_before),
    textAfter: asString(step.textAfter) ?? asString(step.after) ?? asString(step.text_after),
    verification: parseVerification(step.verification ?? step.result),
  };
}

/** Normalise the result of `mtmc.stepHistory` [uri]. */
export function parseStepHistory(raw: unknown): Step[] {
  if (!raw || typeof raw !== "object") return [];
  const steps = (raw as Record<string, unknown>).steps;
  if (!Array.isArray(steps)) return [];
  return steps.map((step, i) => parseStep(step, i)).filter((step): step is Step => step !== undefined);
}

/** Normalise the result of `mtmc.listTargets`. */
export function parseTargets(raw: unknown): TargetInfo[] {
  if (!Array.isArray(raw)) return [];
  return raw
    .filter((t): t is Record<string, unknown> => !!t && typeof t === "object" && typeof (t as any).key === "string")
    .map((t) => ({ key: t.key as string, name: asString(t.name) ?? (t.key as string), summary: asString(t.summary) ?? "" }));
}
