"""KernelBench: from a PyTorch module to a Triton ``ModelNew`` (trace, lower, write) and its evaluation."""
