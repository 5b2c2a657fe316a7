"""Composite PyTorch calls rewritten in a traced graph as the ops they are made of, so that they lower.

``F.normalize(x, p=2, dim=d, eps=e)`` is ``x / x.norm(2, d, keepdim=True).clamp(min=e)`` (PyTorch's own
definition): a keepdim reduction, a pointwise op on the statistic and a pointwise op with x, which the
lowering fuses into one row-normalization kernel. Runs before shape propagation, which then fills in the
new nodes' shapes.
"""

from __future__ import annotations

import operator


def decompose(graph_module) -> int:
    """Rewrite the composites of ``graph_module`` in place; how many were rewritten."""
    import torch
    import torch.nn.functional as F

    graph = graph_module.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not F.normalize:
            continue
        names = ["input", "p", "dim", "eps"]
        values = {**dict(zip(names, node.args)), **node.kwargs}
        p, dim, eps = values.get("p", 2.0), values.get("dim", 1), values.get("eps", 1e-12)
        if values.get("out") is not None or p not in (2, 2.0) or not isinstance(dim, int) or not isinstance(eps, (int, float)):
            continue
        x = values["input"]
        with graph.inserting_before(node):
            norm = graph.call_function(torch.norm, (x, 2.0, dim, True))
            denominator = graph.call_function(torch.clamp, (norm,), {"min": float(eps)})
            quotient = graph.call_function(operator.truediv, (x, denominator))
        node.replace_all_uses_with(quotient)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        graph_module.recompile()
    return rewritten
