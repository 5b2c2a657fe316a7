"""A cached F16 copy of a small quantized GGUF: llama.cpp evaluates prompts about twice as fast on it.

On an AVX2 CPU, llama.cpp's batched matrix kernels for Q4_1 (the bundled SmolLM2-135M) run at about
half the speed of its F16 ones (100 prompt tokens: 435-514 ms against 247-251 ms on the 2-core CI
machine; benchmarks/results/policy_latency.md). Dequantizing Q4_1 to F16 is exact up to F16 rounding
(each weight is ``d * q + m``), so the copy ranks like the original (the largest change of a
candidate's probability over the corpus was 0.018). Q4_0 re-quantization would be as fast but
changes the rankings (largest change 0.21), so it is not used.

Only small models get a copy (F16 weights of at most ``MAX_PARAMS`` parameters, ~400 MB of memory);
bigger ones stay as they are. The copy lives in the user's cache folder, keyed by the source file's
path, size and modification time, and is written atomically, so several servers can share it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

MAX_PARAMS = 200_000_000
# llama_ftype values that are already fast for batched prompts on a CPU (F32, F16, BF16).
FLOAT_FILE_TYPES = (0, 1, 32)


def cache_folder() -> Path:
    """``$MTMC_CACHE_DIR/models``, else ``$XDG_CACHE_HOME/mtmc-lsp/models``, else ``~/.cache/mtmc-lsp/models``."""
    explicit = os.environ.get("MTMC_CACHE_DIR")
    if explicit:
        return Path(explicit) / "models"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mtmc-lsp" / "models"


def _cached_name(source: Path) -> str:
    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return f"{source.stem}.{key}.f16.gguf"


def _file_type_and_params(source: Path) -> tuple[int | None, int]:
    """(``general.file_type``, parameter count) from a vocabulary-only load (~0.2 s, no weights read)."""
    import llama_cpp
    from llama_cpp import _internals as internals
    from llama_cpp._logger import set_verbose

    set_verbose(False)  # llama.cpp logs every tensor it reads or converts
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = internals.LlamaModel(path_model=str(source), params=params, verbose=False)
    try:
        raw = model.metadata().get("general.file_type")
        return (int(raw) if raw is not None and str(raw).isdigit() else None), int(model.n_params())
    finally:
        model.close()


def f16_copy(source: Path | str, folder: Path | None = None) -> tuple[Path, str]:
    """(the GGUF to compute with, why): the cached F16 copy of ``source`` when it pays, else ``source``.

    Never raises for a model that llama.cpp can read: any failure to make the copy keeps the source.
    """
    source = Path(source)
    folder = folder or cache_folder()
    target = folder / _cached_name(source)
    if target.is_file():
        return target, f"F16 copy {target}"
    try:
        file_type, n_params = _file_type_and_params(source)
    except Exception as exc:  # the real load reports an unreadable model; here we only skip the copy
        return source, f"no F16 copy ({type(exc).__name__}: {exc})"
    if file_type is None or file_type in FLOAT_FILE_TYPES:
        return source, "no F16 copy (the model is not quantized)"
    if n_params > MAX_PARAMS:
        return source, f"no F16 copy ({n_params / 1e6:.0f}M parameters: too large to keep in F16)"
    import llama_cpp

    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=folder)
        os.close(handle)
        try:
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
            params.allow_requantize = True
            params.nthread = max(1, min(4, os.cpu_count() or 1))
            if llama_cpp.llama_model_quantize(str(source).encode(), partial.encode(), params) != 0:
                return source, "no F16 copy (llama.cpp could not convert the model)"
            os.chmod(partial, 0o644)  # mkstemp makes it private; the cache is the user's, readable like any download
            os.replace(partial, target)  # atomic: a concurrent reader sees the whole file or none
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    except OSError as exc:
        return source, f"no F16 copy ({exc.strerror or exc})"
    return target, f"F16 copy {target} (made now)"
