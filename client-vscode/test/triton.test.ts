import { describe, expect, it } from "vitest";
import { findKernels, kernelAtLine, usesTriton } from "../src/triton";

const MATMUL = `import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64})],
    key=["M"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr,
                  M):
    pid = tl.program_id(0)


def helper(x):
    return x


@triton.jit
def add_kernel(x_ptr):
    pass
`;

describe("usesTriton", () => {
  it("recognises imports and decorators", () => {
    expect(usesTriton(MATMUL)).toBe(true);
    expect(usesTriton("from triton import language as tl\n")).toBe(true);
    expect(usesTriton("import numpy\n@triton.jit\ndef k(): pass\n")).toBe(true);
  });

  it("ignores plain Python that merely mentions the word", () => {
    expect(usesTriton("import numpy as np\n# tritonic prose\nx = 'triton'\n")).toBe(false);
    expect(usesTriton("import tritonclient\n")).toBe(false);
  });
});

describe("findKernels", () => {
  it("finds jit kernels behind multi-line decorators and skips plain functions", () => {
    expect(findKernels(MATMUL)).toEqual([
      { name: "matmul_kernel", line: 10 },
      { name: "add_kernel", line: 20 },
    ]);
  });

  it("accepts CRLF line endings", () => {
    expect(findKernels("@triton.jit\r\ndef k(x):\r\n    pass\r\n")).toEqual([{ name: "k", line: 1 }]);
  });

  it("picks the kernel the cursor is in", () => {
    const kernels = findKernels(MATMUL);
    expect(kernelAtLine(kernels, 12)?.name).toBe("matmul_kernel");
    expect(kernelAtLine(kernels, 22)?.name).toBe("add_kernel");
    expect(kernelAtLine(kernels, 2)).toBeUndefined();
  });
});
