"""The benchmark suite: naive Triton kernels, one file per kernel, written the way people first write them.

Every file follows the function-harness style of ``mtmc_lsp/examples``: a host function named after
the file that launches the kernels, ``get_inputs(device=..., <sizes>)`` (realistic sizes on a GPU,
tiny ones on the CPU for the interpreter), ``reference(*inputs)`` in higher precision, plus
``eager(*inputs)`` (what a PyTorch user writes; what torch.compile compiles) and
``roofline_cost(*inputs) -> {"bytes": ..., "flops": ...}`` (each input read once, each output
written once). Kept apart from tests/corpus so the policy never trains on what it is scored on.
"""
