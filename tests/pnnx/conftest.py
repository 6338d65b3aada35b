"""Shared fixtures for the PNNX IR tests: real pnnx exports, made once per module run."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

try:
    importlib.import_module("kuiperinfer")
except ImportError:
    # ``kuiperinfer/__init__.py`` imports the whole engine. While other parts of it are
    # being written, that can fail; the pnnx package needs none of it, so load it alone.
    for name in [n for n in sys.modules if n == "kuiperinfer" or n.startswith("kuiperinfer.")]:
        del sys.modules[name]
    package = types.ModuleType("kuiperinfer")
    package.__path__ = [str(Path(__file__).resolve().parents[2] / "kuiperinfer")]
    sys.modules["kuiperinfer"] = package
