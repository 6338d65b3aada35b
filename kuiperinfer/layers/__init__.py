"""Layers: one module per operator family. Importing this package registers them all."""

from kuiperinfer.layers import (  # noqa: F401  (imported to register the layers)
    activation,
    convolution,
    expression,
    linear,
    normalization,
    pooling,
    shape,
    softmax,
    structure,
    tensor_ops,
)
from kuiperinfer.layers.base import Layer, NonParamLayer, ParamLayer
from kuiperinfer.layers.registry import LayerRegisterer, register_layer

__all__ = ["Layer", "NonParamLayer", "ParamLayer", "LayerRegisterer", "register_layer"]
