"""Serving models over HTTP with the Open Inference Protocol (KServe v2, Triton's REST API).

>>> from kuiperinfer.serve import ServedModel, ServeSettings, create_app
>>> app = create_app([ServedModel.load("resnet18.pnnx.param")], ServeSettings(max_batch_size=8))
>>> # any ASGI server runs it: uvicorn.run(app, host="127.0.0.1", port=8000)

``kuiper serve`` does this from the command line. The ASGI stack (Starlette, uvicorn) is
the optional ``kuiperinfer[serve]`` extra: this package imports it, the engine does not.
``protocol`` parses and encodes the messages, ``batcher`` joins requests into batches,
``app`` routes them.
"""

from kuiperinfer.serve.app import ServeSettings, create_app
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import ProtocolError, TensorSpec

__all__ = ["ProtocolError", "ServeSettings", "ServedModel", "TensorSpec", "create_app"]
