"""Loading and saving a pnnx export: the ``.pnnx.param`` text and the ``.pnnx.bin`` archive
beside it, as pnnx's ``Graph::load`` and ``Graph::save`` do.

>>> graph = load_graph("model.pnnx.param")       # model.pnnx.bin beside it
>>> save_graph(graph, "copy.pnnx.param")         # copy.pnnx.bin beside it

The text is read and written by :mod:`kuiperinfer.pnnx.param_file`, the archive by
:mod:`kuiperinfer.pnnx.storezip`; this module joins the attributes the text declares to
the bytes the archive holds, and checks that they agree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from kuiperinfer.errors import BinArchiveError, GraphError
from kuiperinfer.pnnx.dtypes import suffix_of
from kuiperinfer.pnnx.ir import Attribute, Graph, Operator
from kuiperinfer.pnnx.param_file import format_param, read_param
from kuiperinfer.pnnx.storezip import StoreZipReader, StoreZipWriter

__all__ = ["load_graph", "save_graph", "default_bin_path"]


def default_bin_path(param_path: str | os.PathLike) -> str:
    """The archive beside a .param: ``x.pnnx.param`` -> ``x.pnnx.bin``."""
    path = os.fspath(param_path)
    return (path[:-len(".param")] if path.endswith(".param") else path) + ".bin"


def load_graph(param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None,
               *, max_tensor_bytes: int | None = None) -> Graph:
    """Read a ``.pnnx.param`` and its ``.pnnx.bin`` (default: the .bin beside it).

    Attribute data stays in the memory-mapped archive (zero-copy views). A graph
    without attributes needs no archive. ``max_tensor_bytes`` (default
    :data:`kuiperinfer.pnnx.param_file.DEFAULT_MAX_TENSOR_BYTES`) refuses absurd
    declared tensor sizes before anything is allocated. Raises
    :class:`~kuiperinfer.errors.ParamSyntaxError` or
    :class:`~kuiperinfer.errors.BinArchiveError`.
    """
    graph = read_param(param_path, max_tensor_bytes=max_tensor_bytes)
    graph.bin_path = default_bin_path(param_path) if bin_path is None else os.fspath(bin_path)

    pending = [(op, key, attr) for op in graph.ops for key, attr in op.attrs.items()
               if attr.data is None]
    for _, _, attr in pending:  # no bytes to read: null type or empty shape
        if attr.nbytes() == 0 and (attr.type == 0 or not attr.shape):
            attr.data = b""
    pending = [item for item in pending if item[2].data is None]
    if not pending:
        return graph
    if not os.path.exists(graph.bin_path):
        op, key, _ = pending[0]
        raise BinArchiveError(f"archive not found; it must hold {len(pending)} attribute(s), "
                              f"first {op.name + '.' + key!r}", graph.bin_path)
    with StoreZipReader(graph.bin_path) as archive:
        for op, key, attr in pending:
            entry = op.name + "." + key
            expected = attr.nbytes()
            shape = ",".join(map(str, attr.shape))
            where = (f"operator {op.name!r} ({op.type}, {graph.param_path}:{op.line}) "
                     f"attribute {key!r} ({shape}){suffix_of(attr.type)}")
            if entry not in archive:
                raise BinArchiveError(f"{where}: entry {entry!r} is missing "
                                      f"(expected {expected} bytes)", graph.bin_path)
            actual = archive.size(entry)
            if actual != expected:
                raise BinArchiveError(f"{where}: expected {expected} bytes, entry {entry!r} "
                                      f"has {actual} bytes", graph.bin_path)
            attr.data = archive.view(entry)
    return graph


def save_graph(graph: Graph, param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None) -> None:
    """Write ``graph`` as pnnx does: the .param text and the stored-zip .bin (default: the
    .bin beside the .param).

    For a graph read from a pnnx export both files come out byte-identical. Each file
    is written beside its target and renamed into place, so saving over the archive
    a graph was loaded from is safe.
    """
    param_path = os.fspath(param_path)
    bin_path = default_bin_path(param_path) if bin_path is None else os.fspath(bin_path)
    text = format_param(graph).encode("utf-8")

    bin_tmp = _temp_beside(bin_path)
    try:
        with StoreZipWriter(bin_tmp) as writer:
            for op, key, attr in _sorted_attrs(graph):
                if attr.data is None:
                    raise GraphError(f"operator {op.name!r} attribute {key!r} has no data")
                writer.write_file(op.name + "." + key, attr.data)
        param_tmp = _temp_beside(param_path)
        try:
            with open(param_tmp, "wb") as f:
                f.write(text)
            os.replace(param_tmp, param_path)
        finally:
            if os.path.exists(param_tmp):
                os.unlink(param_tmp)
        os.replace(bin_tmp, bin_path)
    finally:
        if os.path.exists(bin_tmp):
            os.unlink(bin_tmp)


def _temp_beside(path: str) -> str:
    return f"{path}.tmp{os.getpid()}"


def _sorted_attrs(graph: Graph) -> Iterable[tuple[Operator, str, Attribute]]:
    """Every attribute in pnnx's archive order: operators in order, keys sorted."""
    for op in graph.ops:
        for key in sorted(op.attrs):
            yield op, key, op.attrs[key]
