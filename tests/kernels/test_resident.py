"""The weights' arena: copies on cache lines, apart, and on huge pages where Linux gives them."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from kuiperinfer.kernels import resident
from kuiperinfer.kernels.matrix.products import Fp32Product


def test_copies_are_equal_contiguous_on_cache_lines_and_apart():
    arena = resident.WeightArena(chunk=1 << 20)
    rng = np.random.default_rng(0)
    values = [rng.random((3, 5), np.float32)[:, ::2], rng.integers(-9, 9, 1000, np.int8),
              rng.random(300_000).astype(np.float32), np.zeros(0, np.uint16)]     # the third is mapped alone
    copies = [arena.copy(v) for v in values]
    for value, copy in zip(values, copies):
        assert copy.dtype == value.dtype and copy.shape == value.shape and np.array_equal(copy, value)
        assert copy.flags.c_contiguous and copy.flags.writeable and copy.ctypes.data % resident.ALIGNMENT == 0
    spans = sorted((c.ctypes.data, c.ctypes.data + c.nbytes) for c in copies if c.nbytes)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    copies[0][...] = 7                                  # a copy, not a view of what was packed
    assert not np.any(values[0] == 7)


def test_a_full_chunk_is_let_go_and_a_new_one_mapped():
    arena = resident.WeightArena(chunk=resident.HUGE_PAGE)
    first = arena.copy(np.ones(799_999, np.uint8))
    second = arena.copy(np.ones(800_000, np.uint8))      # on the next cache line
    third = arena.copy(np.ones(800_000, np.uint8))       # does not fit in the first chunk
    assert second.ctypes.data - first.ctypes.data == 800_000
    assert not first.ctypes.data <= third.ctypes.data < first.ctypes.data + resident.HUGE_PAGE
    assert first.ctypes.data % resident.HUGE_PAGE == third.ctypes.data % resident.HUGE_PAGE == 0


def huge_bytes_at(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(bound, 16) for bound in head.split("-"))
            inside = start <= address < end
        elif inside and head == "AnonHugePages:":
            return int(line.split()[1]) * 1024
    return 0


def test_weights_are_on_huge_pages_where_linux_gives_them():
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    weights = resident.resident(np.ones(3 << 20, np.float32))     # 12 MiB
    assert weights.ctypes.data % resident.ALIGNMENT == 0 and np.all(weights == 1)
    if mode.exists() and "[never]" not in mode.read_text():     # else ordinary pages, the same values
        assert huge_bytes_at(weights.ctypes.data) >= resident.HUGE_PAGE


def test_products_pack_their_weights_into_the_arena():
    weight = np.random.default_rng(1).random((300, 200), np.float32)
    product = Fp32Product(weight)
    x = np.random.default_rng(2).random((3, 300), np.float32)
    np.testing.assert_allclose(product(x), x @ weight, rtol=1e-5, atol=1e-4)
    if product.kernel.dot is not None:                 # packed for tiles (the reference keeps the weight)
        base = product.packed
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        assert isinstance(base.obj, mmap.mmap) and product.packed.ctypes.data % resident.ALIGNMENT == 0


def test_in_arena_tells_the_arenas_memory_from_the_model_files_and_numpys(tmp_path):
    placed = resident.WeightArena().copy(np.arange(10, dtype=np.float32))
    (tmp_path / "file.bin").write_bytes(bytes(64))
    with open(tmp_path / "file.bin", "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        of_file = np.frombuffer(mapped, np.float32)
        assert resident.in_arena(placed) and resident.in_arena(placed[2:].view(np.int32))
        assert not resident.in_arena(of_file) and not resident.in_arena(np.ones(3))
        del of_file
        mapped.close()
