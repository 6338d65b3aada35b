"""The ``.pnnx.bin`` archive: a stored (uncompressed) zip64 file, as pnnx's ``storezip.cpp``.

Every attribute is one entry holding raw little-endian tensor bytes, with no
header and no alignment. Because nothing is compressed, :class:`StoreZipReader`
memory-maps the file and hands out zero-copy ``memoryview`` slices of it.
:class:`StoreZipWriter` writes the same bytes pnnx writes (checked against the
pnnx 20261020 PyPI build): no timestamps, "version" fields 0, every size in a zip64
extra field with 0xffffffff in the classic fields, and a zip64 end record.

Layout of a zip file, for the reader::

    [local header + name + extra][data]   ... one per entry
    [central directory header + name + extra + comment]   ... one per entry
    [zip64 end of central directory record]   (zip64 only)
    [zip64 end of central directory locator]  (zip64 only)
    [end of central directory record + comment]
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from typing import NamedTuple

from kuiperinfer.errors import BinArchiveError

__all__ = ["StoreZipReader", "StoreZipWriter"]

_LOCAL = struct.Struct("<4sHHHHHIIIHH")            # 30 bytes
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")    # 46 bytes
_EOCD = struct.Struct("<4sHHHHIIH")                # 22 bytes
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")            # 56 bytes
_LOCATOR = struct.Struct("<4sIQI")                 # 20 bytes
_EXTRA_HEADER = struct.Struct("<HH")
_ZIP64_EXTRA = struct.Struct("<QQQI")              # what pnnx writes: sizes, offset, disk

_SIG_LOCAL = b"PK\x03\x04"
_SIG_CENTRAL = b"PK\x01\x02"
_SIG_EOCD = b"PK\x05\x06"
_SIG_EOCD64 = b"PK\x06\x06"
_SIG_LOCATOR = b"PK\x06\x07"

_ZIP64_ID = 0x0001
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_MAX_COMMENT = 0xFFFF
_FLAG_ENCRYPTED = 0x0001
_FLAG_UTF8 = 0x0800


class _Entry(NamedTuple):
    offset: int   # of the data, in the file
    size: int
    crc32: int


class StoreZipReader:
    """Read-only, memory-mapped view of a stored zip archive.

    >>> with StoreZipReader("model.pnnx.bin") as archive:
    ...     weight = archive.view("conv.weight")   # memoryview, no copy

    Views stay valid after :meth:`close`: the mapping lives until the last view is gone.
    Anything wrong with the file raises :class:`~kuiperinfer.errors.BinArchiveError`.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._entries: dict[str, _Entry] = {}
        self._mm: mmap.mmap | None = None
        self._mv: memoryview | None = None
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise BinArchiveError(f"cannot open: {e.strerror}", self.path) from None
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < _EOCD.size:
                raise BinArchiveError(f"not a zip archive: only {size} bytes", self.path)
            try:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:
                raise BinArchiveError(f"cannot map the file: {e}", self.path) from None
        self._mv = memoryview(self._mm)
        try:
            self._read_directory()
        except struct.error as e:  # a bounds check was missed: still a broken archive
            self.close()
            raise BinArchiveError(f"truncated zip record ({e})", self.path) from None
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- public API

    def names(self) -> list[str]:
        """Entry names in archive order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def size(self, name: str) -> int:
        """Byte size of entry ``name``."""
        return self._entry(name).size

    def crc32(self, name: str) -> int:
        """The CRC-32 the central directory records for ``name``."""
        return self._entry(name).crc32

    def view(self, name: str) -> memoryview:
        """The bytes of entry ``name``: a read-only, zero-copy slice of the mapped file."""
        entry = self._entry(name)
        if self._mv is None:
            raise BinArchiveError(f"archive is closed (reading {name!r})", self.path)
        return self._mv[entry.offset:entry.offset + entry.size]

    def check_crc(self, name: str) -> None:
        """Raise BinArchiveError if the data of ``name`` does not match its recorded CRC-32."""
        actual = zlib.crc32(self.view(name))
        if actual != self.crc32(name):
            raise BinArchiveError(f"entry {name!r}: CRC-32 is {actual:08x}, the directory "
                                  f"says {self.crc32(name):08x}", self.path)

    def close(self) -> None:
        """Release the mapping (it stays alive while views handed out still exist)."""
        if self._mv is not None:
            self._mv.release()
            self._mv = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # views are still in use; the mapping goes away with the last of them
            self._mm = None

    def __enter__(self) -> StoreZipReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- parsing

    def _entry(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise BinArchiveError(f"no entry {name!r} in the archive", self.path)
        return entry

    def _fail(self, message: str) -> BinArchiveError:
        return BinArchiveError(message, self.path)

    def _find_end_record(self) -> int:
        """Offset of the end-of-central-directory record: the last one whose comment
        reaches exactly to the end of the file."""
        mm, size = self._mm, len(self._mm)
        floor = max(0, size - _EOCD.size - _MAX_COMMENT)
        pos = size - _EOCD.size
        while pos >= floor:
            pos = mm.rfind(_SIG_EOCD, floor, pos + 4)
            if pos < 0:
                break
            comment_length = _EOCD.unpack_from(mm, pos)[7]
            if pos + _EOCD.size + comment_length == size:
                return pos
            pos -= 1
        raise self._fail("not a zip archive (no end-of-central-directory record), or truncated")

    def _read_directory(self) -> None:
        mm = self._mm
        eocd = self._find_end_record()
        _, disk, cd_disk, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(mm, eocd)
        data_end = eocd  # where entry data and the directory must end

        locator = eocd - _LOCATOR.size
        if locator >= 0 and mm[locator:locator + 4] == _SIG_LOCATOR:
            _, _, eocd64, _ = _LOCATOR.unpack_from(mm, locator)
            if eocd64 + _EOCD64.size > locator or mm[eocd64:eocd64 + 4] != _SIG_EOCD64:
                raise self._fail("bad zip64 end-of-central-directory record (truncated?)")
            (_, _, _, _, disk, cd_disk, _, count, cd_size, cd_offset) = _EOCD64.unpack_from(mm, eocd64)
            data_end = eocd64
        elif _U16 in (disk, cd_disk, count) or _U32 in (cd_size, cd_offset):
            raise self._fail("zip64 end-of-central-directory record is missing (truncated?)")
        if disk not in (0, _U16) or cd_disk not in (0, _U16):
            raise self._fail("multi-disk zip archives are not supported")
        if cd_offset + cd_size > data_end:
            raise self._fail(f"central directory (offset {cd_offset}, {cd_size} bytes) runs past "
                             f"the end of the archive (truncated?)")
        if count > cd_size // _CENTRAL.size:
            raise self._fail(f"{count} entries cannot fit in a {cd_size}-byte central directory")

        pos, cd_end = cd_offset, cd_offset + cd_size
        for index in range(count):
            if pos + _CENTRAL.size > cd_end or mm[pos:pos + 4] != _SIG_CENTRAL:
                raise self._fail(f"bad central directory record #{index} at offset {pos}")
            (_, _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len, comment_len,
             disk_start, _, _, local) = _CENTRAL.unpack_from(mm, pos)
            name_at = pos + _CENTRAL.size
            pos = name_at + name_len + extra_len + comment_len
            if pos > cd_end:
                raise self._fail(f"central directory record #{index} runs past the directory")
            name = self._decode_name(bytes(mm[name_at:name_at + name_len]), flags)
            extra = bytes(mm[name_at + name_len:name_at + name_len + extra_len])
            usize, csize, local, disk_start = self._zip64(name, extra, usize, csize, local, disk_start)

            if name in self._entries:
                raise self._fail(f"entry {name!r} appears twice")
            if flags & _FLAG_ENCRYPTED:
                raise self._fail(f"entry {name!r} is encrypted")
            if method != 0:
                raise self._fail(f"entry {name!r} is compressed (method {method}); "
                                 f"only stored (uncompressed) entries are supported")
            if csize != usize:
                raise self._fail(f"entry {name!r}: stored sizes differ ({csize} != {usize})")
            if disk_start not in (0, _U16):
                raise self._fail(f"entry {name!r} lives on disk {disk_start}")
            self._entries[name] = _Entry(self._data_offset(name, local, usize, cd_offset), usize, crc)

    def _decode_name(self, raw: bytes, flags: int) -> str:
        # pnnx writes UTF-8 names without setting the UTF-8 flag; try UTF-8 first.
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if flags & _FLAG_UTF8:
                raise self._fail(f"entry name {raw!r} is not valid UTF-8") from None
            return raw.decode("cp437")

    def _zip64(self, name: str, extra: bytes, usize: int, csize: int, local: int,
               disk: int) -> tuple[int, int, int, int]:
        """Replace saturated fields by the zip64 extra field's values, in the spec's order."""
        if not (usize == _U32 or csize == _U32 or local == _U32 or disk == _U16):
            return usize, csize, local, disk
        at = 0
        while at + _EXTRA_HEADER.size <= len(extra):
            tag, length = _EXTRA_HEADER.unpack_from(extra, at)
            body = extra[at + 4:at + 4 + length]
            if len(body) < length:
                break
            if tag == _ZIP64_ID:
                fields = []
                for width, needed in ((8, usize == _U32), (8, csize == _U32),
                                      (8, local == _U32), (4, disk == _U16)):
                    if needed:
                        if len(body) < width:
                            raise self._fail(f"entry {name!r}: zip64 extra field is too short")
                        fields.append(int.from_bytes(body[:width], "little"))
                        body = body[width:]
                    else:
                        fields.append(None)
                return (usize if fields[0] is None else fields[0],
                        csize if fields[1] is None else fields[1],
                        local if fields[2] is None else fields[2],
                        disk if fields[3] is None else fields[3])
            at += 4 + length
        if usize == _U32 or csize == _U32 or local == _U32:
            raise self._fail(f"entry {name!r}: sizes need a zip64 extra field, which is missing")
        return usize, csize, local, disk

    def _data_offset(self, name: str, local: int, size: int, data_end: int) -> int:
        """Check the local header of an entry; return where its data starts."""
        mm = self._mm
        if local + _LOCAL.size > data_end or mm[local:local + 4] != _SIG_LOCAL:
            raise self._fail(f"entry {name!r}: no local header at offset {local}")
        name_len, extra_len = _LOCAL.unpack_from(mm, local)[9:11]
        start = local + _LOCAL.size + name_len + extra_len
        if start + size > data_end:
            raise self._fail(f"entry {name!r}: its {size} bytes of data (from offset {start}) run "
                             f"past the end of the data area at {data_end} (truncated?)")
        return start


class StoreZipWriter:
    """Write a stored zip64 archive byte-identical to pnnx's ``StoreZipWriter``.

    >>> with StoreZipWriter("out.pnnx.bin") as writer:
    ...     writer.write_file("conv.weight", weight_bytes)
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._entries: list[tuple[bytes, int, int, int]] = []  # name, crc, size, local offset
        self._names: set[bytes] = set()
        self._offset = 0
        try:
            self._file = open(self.path, "wb")
        except OSError as e:
            raise BinArchiveError(f"cannot create: {e.strerror}", self.path) from None

    def write_file(self, name: str, data: bytes | bytearray | memoryview) -> None:
        """Append entry ``name`` holding ``data`` (any C-contiguous buffer)."""
        if self._file is None:
            raise BinArchiveError(f"archive is closed (writing {name!r})", self.path)
        raw = name.encode("utf-8")
        if not raw or len(raw) > _U16 or b"\0" in raw:
            raise BinArchiveError(f"invalid entry name {name!r}", self.path)
        if raw in self._names:
            raise BinArchiveError(f"entry {name!r} written twice", self.path)
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        size = view.nbytes
        crc = zlib.crc32(view)
        header = _LOCAL.pack(_SIG_LOCAL, 0, 0, 0, 0, 0, crc, _U32, _U32, len(raw),
                             _EXTRA_HEADER.size + _ZIP64_EXTRA.size)
        extra = _EXTRA_HEADER.pack(_ZIP64_ID, _ZIP64_EXTRA.size) + _ZIP64_EXTRA.pack(size, size, 0, 0)
        self._file.write(header + raw + extra)
        self._file.write(view)
        self._names.add(raw)
        self._entries.append((raw, crc, size, self._offset))
        self._offset += len(header) + len(raw) + len(extra) + size

    def close(self) -> None:
        """Write the central directory and the zip64 end records, then close the file."""
        if self._file is None:
            return
        f, self._file = self._file, None
        with f:
            cd_offset = self._offset
            for raw, crc, size, local in self._entries:
                f.write(_CENTRAL.pack(_SIG_CENTRAL, 0, 0, 0, 0, 0, 0, crc, _U32, _U32, len(raw),
                                      _EXTRA_HEADER.size + _ZIP64_EXTRA.size, 0, _U16, 0, 0, _U32))
                f.write(raw)
                f.write(_EXTRA_HEADER.pack(_ZIP64_ID, _ZIP64_EXTRA.size))
                f.write(_ZIP64_EXTRA.pack(size, size, local, 0))
            eocd64 = f.tell()
            count = len(self._entries)
            f.write(_EOCD64.pack(_SIG_EOCD64, _EOCD64.size - 12, 0, 0, 0, 0, count, count,
                                 eocd64 - cd_offset, cd_offset))
            f.write(_LOCATOR.pack(_SIG_LOCATOR, 0, eocd64, 1))
            f.write(_EOCD.pack(_SIG_EOCD, _U16, _U16, _U16, _U16, _U32, _U32, 0))

    def __enter__(self) -> StoreZipWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
