"""Layers: one module per operator family. Importing this package registers them all.

Every module in this package registers its layers with :func:`register_layer` when
imported; the loop below imports each one, so a new family needs only a new file.
"""

import importlib
import pkgutil

from kuiperinfer.layers.base import Layer, NonParamLayer, ParamLayer
from kuiperinfer.runtime.registry import LayerRegisterer, register_layer

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Layer", "NonParamLayer", "ParamLayer", "LayerRegisterer", "register_layer"]
