"""Serving models with the Open Inference Protocol (KServe v2, Triton) over HTTP and gRPC.

>>> from kuiperinfer.serve import ServedModel, ServeSettings, create_app
>>> app = create_app([ServedModel.load("resnet18.pnnx.param")], ServeSettings(max_batch_size=8))
>>> # any ASGI server runs it: uvicorn.run(app, host="127.0.0.1", port=8000)

``kuiper serve`` does this from the command line. The ASGI stack (Starlette, uvicorn), gRPC
(grpcio, grpcio-tools) and the metrics (prometheus-client) are the optional
``kuiperinfer[serve]`` extra: this package imports them, the engine does not; the modules
that need gRPC, Prometheus or Ray Serve import them only when they are imported themselves.
``protocol`` parses, checks and encodes the messages, ``batcher`` joins requests into
batches, ``server`` holds the models and answers what the protocol asks, ``app`` is the
HTTP front end, ``rpc`` the gRPC one, ``metrics`` the Prometheus endpoint, ``repository``
the folder of models loaded while serving, ``ray_serve`` the replicas on Ray Serve.
"""

from kuiperinfer.serve.app import create_app
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import ProtocolError, TensorSpec
from kuiperinfer.serve.repository import ModelRepository, ModelSource
from kuiperinfer.serve.server import ModelServer, ServeSettings

__all__ = ["ModelRepository", "ModelServer", "ModelSource", "ProtocolError", "ServeSettings", "ServedModel",
           "TensorSpec", "create_app"]
