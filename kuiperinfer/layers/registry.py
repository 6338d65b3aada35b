"""LayerRegisterer: the one table from pnnx operator types to layer creators.

As in the seeds, every layer registers a creator under its pnnx type name when its
module is imported; building a graph asks the registry for the layer of each
operator. :func:`register_layer` registers one layer class under every spelling
pnnx writes for it (``nn.ReLU``, ``F.relu``, ``torch.relu``, ...).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Callable, TypeVar

from kuiperinfer.errors import KuiperError, LayerCreateError, RegistryError, UnknownOperatorError

if TYPE_CHECKING:
    from kuiperinfer.layers.base import Layer
    from kuiperinfer.runtime.operator import RuntimeOperator

Creator = Callable[["RuntimeOperator"], "Layer"]
L = TypeVar("L", bound=type)


class LayerRegisterer:
    """The global registry of layer creators, keyed by pnnx operator type."""

    _registry: dict[str, Creator] = {}

    @classmethod
    def register_creator(cls, layer_type: str, creator: Creator) -> None:
        """Register ``creator`` for ``layer_type``; registering a type twice is an error."""
        if not callable(creator):
            raise RegistryError(f"creator for {layer_type!r} is not callable")
        if layer_type in cls._registry:
            raise RegistryError(f"layer type {layer_type!r} is already registered")
        cls._registry[layer_type] = creator

    @classmethod
    def unregister(cls, layer_type: str) -> None:
        """Remove a registration (for tests and plug-ins that replace a layer)."""
        cls._registry.pop(layer_type, None)

    @classmethod
    def has(cls, layer_type: str) -> bool:
        return layer_type in cls._registry

    @classmethod
    def layer_types(cls) -> list[str]:
        """Every registered operator type, sorted."""
        return sorted(cls._registry)

    @classmethod
    def closest(cls, layer_type: str, n: int = 5) -> list[str]:
        """The registered types whose names are closest to ``layer_type``."""
        types = cls.layer_types()
        close = difflib.get_close_matches(layer_type, types, n=n, cutoff=0.5)
        if not close:
            tail = layer_type.rsplit(".", 1)[-1].lower()
            close = [t for t in types if t.rsplit(".", 1)[-1].lower() == tail][:n]
        return close

    @classmethod
    def create_layer(cls, op: "RuntimeOperator") -> "Layer":
        """Create the layer of ``op`` through its registered creator."""
        creator = cls._registry.get(op.type)
        if creator is None:
            raise UnknownOperatorError(op.name, op.type, cls.closest(op.type))
        try:
            layer = creator(op)
        except KuiperError:
            raise
        except Exception as exc:  # a creator's bug or an unforeseen parameter form
            raise LayerCreateError(f"creating the layer failed: {type(exc).__name__}: {exc}",
                                   op.name, op.type) from exc
        layer.set_runtime_operator(op)
        return layer


def register_layer(*layer_types: str) -> Callable[[L], L]:
    """Class decorator: register ``cls.create`` under each of ``layer_types``."""

    def decorate(layer_class: L) -> L:
        for layer_type in layer_types:
            LayerRegisterer.register_creator(layer_type, layer_class.create)
        layer_class.layer_types = layer_types
        return layer_class

    return decorate
