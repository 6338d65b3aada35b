"""Compare tools/pnnx_operator_types.txt with the pnnx exporter installed here.

    python -m tools.pnnx_operator_types [--binary PATH]

The list of types was extracted once from pnnx's sources (see the header of
tools/pnnx_operator_types.txt). After a pnnx upgrade, this tool reads the string constants
of the installed ``pnnx`` executable (as ``strings`` does) and prints

- the listed types the executable does not hold as a string of their own (the compiler
  merges some, e.g. ``nn.ReLU`` into the end of another string: look at those by hand);
- the type-like strings (``nn.X``, ``F.x``, ``torch.x``, ``Tensor.x``, ``torchvision.``,
  ``torchaudio.``, ``pnnx.``) that the list lacks, which may be new operator types. Most are
  not: dtype names (``torch.float``), the functions of pnnx.Expression (``torch.abs``),
  names of its model statistics and of its ncnn conversion.

It changes nothing; the list is edited by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tools.operator_table import read_types

TYPE_LIKE = re.compile(rb"(?:nn|F|torch|Tensor|torchvision|torchaudio|pnnx)\.[A-Za-z_][A-Za-z0-9_.]*")


def strings(path: Path, shortest: int = 4) -> set[bytes]:
    """Runs of printable ASCII characters in the file, as the ``strings`` tool finds them."""
    data = path.read_bytes()
    return set(re.findall(rb"[\x20-\x7e]{%d,}" % shortest, data))


def installed_pnnx() -> Path:
    import pnnx

    return Path(pnnx.EXEC_PATH)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, help="the pnnx executable (default: the installed pip package's)")
    args = parser.parse_args(argv)
    binary = args.binary or installed_pnnx()
    found = strings(binary)
    listed = {t.name for t in read_types() if TYPE_LIKE.fullmatch(t.name.encode())}  # prim:: are TorchScript's
    alone = {s.decode() for s in found if TYPE_LIKE.fullmatch(s)}
    print(f"{binary}: {len(alone)} type-like strings; {len(listed)} types listed (prim:: left out)")
    print("listed, not a string of their own:", ", ".join(sorted(t for t in listed if t not in alone)) or "none")
    print("type-like strings not listed:", ", ".join(sorted(alone - listed)) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
