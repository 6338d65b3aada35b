"""kuiperinfer: a small, readable inference engine for PNNX models, running on NumPy."""

from kuiperinfer.errors import KuiperError

__all__ = ["KuiperError"]
__version__ = "0.1.0"
