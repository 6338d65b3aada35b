"""Every edit of a RuntimeGraph's structure, between init() and build().

The optimiser's passes change the graph only through these functions, each of which
keeps the links consistent (:meth:`RuntimeGraph.check
<kuiperinfer.runtime.graph.RuntimeGraph.check>` lists the invariants): an operand's
producer and consumers, an operator's input operands and their pnnx names, and the
graph's tables of operators and operands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kuiperinfer.pnnx.ir import Attribute
from kuiperinfer.runtime.attribute import RuntimeAttribute
from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.parameter import RuntimeParameter, RuntimeParameterType


def sole_consumer(op: RuntimeOperator) -> RuntimeOperator | None:
    """The only operator reading ``op``'s only output, once, as its only input; None for any
    other pattern (several outputs or readers, or a graph output, which pnnx.Output reads)."""
    if len(op.output_operands) != 1 or len(op.output_operands[0].consumers) != 1:
        return None
    consumer = op.output_operands[0].consumers[0]
    return consumer if len(consumer.input_operands_seq) == 1 else None


def add_input(op: RuntimeOperator, operand: RuntimeOperand, name: str = "") -> None:
    """Let ``op`` read ``operand`` as its last input (pnnx's ``$name`` ``name``)."""
    op.input_operands_seq.append(operand)
    op.input_names.append(name)
    operand.consumers.append(op)


def absorb_consumer(graph: RuntimeGraph, op: RuntimeOperator, consumer: RuntimeOperator) -> None:
    """Remove ``consumer``, which reads ``op``'s only output (its other inputs, if any, are
    operands ``op`` reads too): ``op`` now produces the consumer's output operand itself, so
    the consumer's readers read it unchanged."""
    (between,) = op.output_operands
    for operand in consumer.input_operands_seq:
        if operand is not between:
            _forget_consumer(operand, consumer)
    (output,) = consumer.output_operands
    op.output_operands = [output]
    output.producer = op
    del graph.operands[between.name]
    graph.operators.remove(consumer)


def absorb_producer(graph: RuntimeGraph, op: RuntimeOperator, producer: RuntimeOperator) -> None:
    """Remove ``producer`` (one input, one output read by ``op`` alone): ``op`` reads the
    producer's input in its place."""
    (source,) = producer.input_operands_seq
    (between,) = producer.output_operands
    op.input_operands_seq[op.input_operands_seq.index(between)] = source
    source.consumers[source.consumers.index(producer)] = op
    del graph.operands[between.name]
    graph.operators.remove(producer)


def set_plan(op: RuntimeOperator, plan: Any, op_type: str | None = None) -> None:
    """Give ``op`` the optimiser's ``plan`` (and a type of our own, for an operator that now
    computes what several did)."""
    op.plan = plan
    if op_type is not None:
        op.type = op_type


def merge_producer(graph: RuntimeGraph, op: RuntimeOperator, producer: RuntimeOperator) -> None:
    """Remove ``producer``, whose one output ``op`` reads as its only input: ``op`` reads the
    producer's inputs instead, and, where others still read the producer's output, produces
    it too, as its last output."""
    (between,) = producer.output_operands
    op.input_operands_seq = list(producer.input_operands_seq)
    op.input_names = list(producer.input_names)
    for operand in producer.input_operands_seq:
        operand.consumers[operand.consumers.index(producer)] = op
    _forget_consumer(between, op)
    if between.consumers:
        between.producer = op
        op.output_operands.append(between)
    else:
        del graph.operands[between.name]
    graph.operators.remove(producer)


def replace_inputs(op: RuntimeOperator, operands: list[RuntimeOperand]) -> None:
    """Let ``op`` read ``operands`` (unnamed) instead of its inputs."""
    for operand in op.input_operands_seq:
        _forget_consumer(operand, op)
    op.input_operands_seq = list(operands)
    op.input_names = [""] * len(operands)
    for operand in operands:
        operand.consumers.append(op)


def remove_unread(graph: RuntimeGraph, ops: list[RuntimeOperator]) -> None:
    """Remove ``ops``, in order, each of whose outputs nothing reads any more."""
    for op in ops:
        if any(operand.consumers for operand in op.output_operands):
            raise ValueError(f"operator {op.name!r} still has readers")
        for operand in op.input_operands_seq:
            _forget_consumer(operand, op)
        for operand in op.output_operands:
            del graph.operands[operand.name]
        graph.operators.remove(op)


def set_weight(op: RuntimeOperator, key: str, value: np.ndarray) -> None:
    """Replace (or add) ``op``'s weight attribute ``key``; a bias also sets ``bias=True``."""
    op.attribute[key] = RuntimeAttribute(Attribute.from_numpy(np.ascontiguousarray(value, np.float32)))
    if key == "bias":
        op.params["bias"] = RuntimeParameter(RuntimeParameterType.kParameterBool, True, "True")


def _forget_consumer(operand: RuntimeOperand, consumer: RuntimeOperator) -> None:
    operand.consumers[:] = [op for op in operand.consumers if op is not consumer]
