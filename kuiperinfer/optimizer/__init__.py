"""The graph optimiser: small named passes that rewrite a graph's operators.

Call :func:`optimize` on a :class:`~kuiperinfer.runtime.graph.RuntimeGraph` after
``graph.init()`` and before ``graph.build()``::

    graph = RuntimeGraph(param_path)
    graph.init()
    optimize(graph)        # rewrites graph.operators / graph.operands in place
    graph.build()          # creates the layers of the rewritten graph

The passes work on the :class:`RuntimeOperator` graph, as pnnx's own passes work on its
IR: they change operators' parameters and weights and remove operators, and the layers
built afterwards read the result. Every pass keeps the graph's meaning (outputs equal
within float32 rounding); a graph loaded without ``optimize`` runs exactly as pnnx
wrote it. See :mod:`kuiperinfer.optimizer.passes` for the passes.
"""

from kuiperinfer.optimizer.passes import PASSES, optimize

__all__ = ["PASSES", "optimize"]
