"""Graph surgery on a RuntimeGraph between init() and build(): finding an operand's
producer and consumers, and removing an operator by letting its producer write its output."""

from __future__ import annotations

from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator


def operator_named(graph: RuntimeGraph, name: str) -> RuntimeOperator:
    return next(op for op in graph.operators if op.name == name)


def sole_consumer(graph: RuntimeGraph, op: RuntimeOperator) -> RuntimeOperator | None:
    """The only operator reading ``op``'s only output, once; None for any other pattern
    (several outputs or consumers, or a graph output, which pnnx.Output consumes)."""
    if len(op.output_operands) != 1 or len(op.output_operands[0].consumers) != 1:
        return None
    consumer = operator_named(graph, op.output_operands[0].consumers[0])
    return consumer if len(consumer.input_operands_seq) == 1 else None


def absorb_consumer(graph: RuntimeGraph, op: RuntimeOperator, consumer: RuntimeOperator) -> None:
    """Remove ``consumer`` (the only reader of ``op``'s only output; its other inputs, if any,
    are ``op``'s own inputs): ``op`` now produces the consumer's output operand itself, so
    the consumer's consumers read it unchanged."""
    between: RuntimeOperand = op.output_operands[0]
    for operand in consumer.input_operands_seq:
        if operand is not between:
            operand.consumers[:] = [name for name in operand.consumers if name != consumer.name]
    (output,) = consumer.output_operands
    op.output_operands = [output]
    output.producer = op.name
    del graph.operands[between.name]
    for name in output.consumers:
        reader = operator_named(graph, name)
        moved = reader.input_operands.pop(consumer.name)
        reader.input_operands.setdefault(op.name, []).extend(moved)
    graph.operators.remove(consumer)


def absorb_producer(graph: RuntimeGraph, op: RuntimeOperator, producer: RuntimeOperator) -> None:
    """Remove ``producer`` (one input, one output read by ``op`` alone): ``op`` reads the
    producer's input instead."""
    (source,) = producer.input_operands_seq
    (between,) = producer.output_operands
    index = op.input_operands_seq.index(between)
    op.input_operands_seq[index] = source
    del op.input_operands[producer.name]
    op.input_operands.setdefault(source.producer, []).append(source)
    source.consumers[source.consumers.index(producer.name)] = op.name
    del graph.operands[between.name]
    graph.operators.remove(producer)
