"""LayerRegisterer: the one table from pnnx operator types to layer classes.

As in KuiperInfer, every layer class registers under its pnnx type names when its module is
imported (:func:`register_layer`, one class under every spelling pnnx writes for it:
``nn.ReLU``, ``F.relu``, ``torch.relu``, ...), and building a graph asks the registry for
the layer of each operator. The table holds classes, so it also answers what a type is
without building anything: the optimiser asks ``LayerRegisterer.layer_class(op.type)``
for class-level facts such as :attr:`Layer.shape_only <kuiperinfer.layers.base.Layer.shape_only>`.

The runtime knows layers only through this table and two members every layer has: the
classmethod ``create(op, options)`` (KuiperInfer's ``GetInstance``; ``options`` are the
:class:`~kuiperinfer.runtime.options.BuildOptions`, as ncnn's ``Option`` reaches
``create_pipeline``) and ``forward(inputs)``. The
package names the module of its layers (:meth:`LayerRegisterer.add_source`), which the
registry imports when it is first asked for a layer, so that importing the package stays
light and the runtime imports no layer itself.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kuiperinfer.errors import KuiperError, LayerCreateError, RegistryError, UnknownOperatorError

if TYPE_CHECKING:
    from kuiperinfer.runtime.operator import RuntimeOperator
    from kuiperinfer.runtime.options import BuildOptions

L = TypeVar("L", bound=type)


class LayerRegisterer:
    """The global registry of layer classes, keyed by pnnx operator type."""

    _registry: dict[str, type] = {}
    _sources: list[str] = []
    _sources_lock = threading.RLock()

    @classmethod
    def add_source(cls, module: str) -> None:
        """Import ``module``, whose layers register themselves, before the first lookup."""
        with cls._sources_lock:
            cls._sources.append(module)

    @classmethod
    def _table(cls) -> dict[str, type]:
        """The registry, once every source module has been imported."""
        if cls._sources:
            with cls._sources_lock:
                while cls._sources:
                    module = cls._sources.pop(0)
                    try:
                        importlib.import_module(module)
                    except BaseException:
                        cls._sources.insert(0, module)
                        raise
        return cls._registry

    @classmethod
    def register(cls, layer_type: str, layer_class: type) -> None:
        """Register ``layer_class`` for ``layer_type``; registering a type twice is an error."""
        if not callable(getattr(layer_class, "create", None)):
            raise RegistryError(f"layer class for {layer_type!r} has no create() classmethod")
        if layer_type in cls._table():
            raise RegistryError(f"layer type {layer_type!r} is already registered")
        cls._registry[layer_type] = layer_class

    @classmethod
    def unregister(cls, layer_type: str) -> None:
        """Remove a registration (for tests and plug-ins that replace a layer)."""
        cls._table().pop(layer_type, None)

    @classmethod
    def has(cls, layer_type: str) -> bool:
        return layer_type in cls._table()

    @classmethod
    def layer_class(cls, layer_type: str) -> type | None:
        """The class registered for ``layer_type`` (None when there is none)."""
        return cls._table().get(layer_type)

    @classmethod
    def layer_types(cls) -> list[str]:
        """Every registered operator type, sorted."""
        return sorted(cls._table())

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
    def create_layer(cls, op: RuntimeOperator, options: BuildOptions | None = None) -> Any:
        """Create the layer of ``op`` through its registered class's ``create``, with the
        build ``options`` (default: NumPy reference kernels, fp32, seed 0)."""
        layer_class = cls._table().get(op.type)
        if layer_class is None:
            raise UnknownOperatorError(op.name, op.type, cls.closest(op.type))
        if options is None:
            from kuiperinfer.runtime.options import BuildOptions
            options = BuildOptions()
        try:
            return layer_class.create(op, options)
        except KuiperError:
            raise
        except Exception as exc:  # a creator's bug or an unforeseen parameter form
            raise LayerCreateError(f"creating the layer failed: {type(exc).__name__}: {exc}",
                                   op.name, op.type) from exc


def register_layer(*layer_types: str) -> Callable[[L], L]:
    """Class decorator: register the class under each of ``layer_types``."""

    def decorate(layer_class: L) -> L:
        for layer_type in layer_types:
            LayerRegisterer.register(layer_type, layer_class)
        layer_class.layer_types = layer_types
        return layer_class

    return decorate
