// Shared set-up for tests that activate the extension against the mocked `vscode` and language client.
import { activate, MtmcExtensionApi } from "../src/extension";
import { LanguageClient } from "./mocks/languageclient";
import { makeDocument, makeEditor, mock, resetMock } from "./mocks/vscode";

export const TRITON_SOURCE = `import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass
`;

export const TRITON_PATH = "/ws/kernels/add.py";
export const TRITON_URI = `file://${TRITON_PATH}`;

/** Let pending promise callbacks and timers run. */
export async function flush(times = 5): Promise<void> {
  for (let i = 0; i < times; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

export function resetAll(): void {
  resetMock();
  LanguageClient.reset();
}

/** The most recently created fake language client. */
export function lastClient(): LanguageClient {
  const client = LanguageClient.instances.at(-1);
  if (!client) throw new Error("no language client was created");
  return client;
}

/** Activate with a Triton file open (and active, cursor on `line`) unless told otherwise. */
export async function activateExtension(options: { openTriton?: boolean; line?: number } = {}): Promise<{
  api: MtmcExtensionApi;
  context: { subscriptions: { dispose(): unknown }[] };
}> {
  if (options.openTriton ?? true) {
    const document = makeDocument(TRITON_PATH, TRITON_SOURCE);
    mock.documents.push(document);
    mock.activeEditor = makeEditor(document, options.line ?? 7);
  }
  const context = { subscriptions: [] as { dispose(): unknown }[] };
  const api = await activate(context as any);
  await api.ready;
  await flush();
  return { api, context };
}
