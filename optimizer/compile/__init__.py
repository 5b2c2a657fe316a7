"""Real compilation of Triton kernels for a target GPU, without a GPU, in a worker process.

``compile_kernel(text, kernel_name, constexprs, target, ...) -> CompileReport`` builds the
smallest line-preserving module for the kernel, compiles it with ``triton.compile`` for
``GPUTarget("cuda", arch, 32)`` in a subprocess (user code never runs in the caller), and reads
registers and spills from the ptxas log (cuobjdump as a fallback). Results are cached in memory
and on disk by (module text, constexprs, options, signature, target, triton version).
``compile_findings`` turns reports into MTMC2xx findings; ``plan_jobs`` picks the configs.
"""

from .compiler import CompileJob, clear_memory_cache, compile_jobs, compile_kernel, default_cache_dir, default_signature
from .findings import compile_file_findings, compile_findings
from .module_builder import CompileSetupError, build_module
from .plan import PlannedJob, plan_jobs
from .report import CompileReport

__all__ = [
    "CompileJob", "CompileReport", "CompileSetupError", "PlannedJob", "build_module", "clear_memory_cache",
    "compile_file_findings", "compile_findings", "compile_jobs", "compile_kernel", "default_cache_dir",
    "default_signature", "plan_jobs",
]
