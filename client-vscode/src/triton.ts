// Cheap, text-only knowledge of Triton files: enough to decide when to start the server and which
// kernel the cursor is in. The server does the real analysis; this must never need it.

/** True when a Python text imports or uses Triton (the activation gate). */
export function usesTriton(text: string): boolean {
  return /^\s*(?:import\s+triton\b|from\s+triton\b)|@triton\.jit\b|\btriton\.language\b/m.test(text);
}

export interface KernelLocation {
  name: string;
  /** 0-based line of the `def`. */
  line: number;
}

/** The `@triton.jit` (or `@triton.autotune`/`@triton.heuristics`-wrapped) functions of a text, in order. */
export function findKernels(text: string): KernelLocation[] {
  const lines = text.split(/\r\n|\r|\n/);
  const kernels: KernelLocation[] = [];
  let decoratedByTriton = false;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (/^\s*@\s*(?:triton\.)?jit\b/.test(line) || /^\s*@\s*triton\.(?:autotune|heuristics|jit)\b/.test(line)) {
      decoratedByTriton = true;
      continue;
    }
    if (/^\s*@/.test(line)) continue; // other decorators between @triton.jit and def
    const def = /^\s*def\s+([A-Za-z_]\w*)\s*\(/.exec(line);
    if (def) {
      if (decoratedByTriton) kernels.push({ name: def[1], line: i });
      decoratedByTriton = false;
    } else if (line.trim() !== "" && !line.trim().startsWith("#") && !/^\s*[)\],]/.test(line) && !/^\s+/.test(line)) {
      // A top-level statement that is not part of a multi-line decorator ends the decorator run.
      decoratedByTriton = false;
    }
  }
  return kernels;
}

/** The kernel whose `def` is the closest at or above `line` (the one the cursor is in), if any. */
export function kernelAtLine(kernels: KernelLocation[], line: number): KernelLocation | undefined {
  let best: KernelLocation | undefined;
  for (const kernel of kernels) {
    if (kernel.line <= line) best = kernel;
  }
  return best;
}
