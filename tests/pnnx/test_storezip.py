"""The stored zip64 archive: reading what zipfile and pnnx write, writing what pnnx writes."""

from __future__ import annotations

import struct
import zipfile

import numpy as np
import pytest

from kuiperinfer.errors import BinArchiveError
from kuiperinfer.pnnx import StoreZipReader, StoreZipWriter

ENTRIES = {"conv.weight": bytes(range(256)) * 3, "conv.bias": b"\x01\x02\x03", "empty": b"",
           "mha.out_proj.weight": np.arange(6, dtype=np.float32).tobytes()}


def make_zipfile(path, entries=ENTRIES, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def make_ours(path, entries=ENTRIES):
    with StoreZipWriter(path) as w:
        for name, data in entries.items():
            w.write_file(name, data)
    return path


def test_reads_python_zipfile_stored_archive(tmp_path):
    with StoreZipReader(make_zipfile(tmp_path / "a.zip")) as r:
        assert r.names() == list(ENTRIES)
        for name, data in ENTRIES.items():
            assert r.size(name) == len(data)
            assert bytes(r.view(name)) == data
            r.check_crc(name)
        assert "conv.bias" in r and "conv" not in r and len(r) == 4


def test_reads_python_zipfile_forced_zip64(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as z:
        with z.open("big", "w", force_zip64=True) as f:
            f.write(b"x" * 1000)
    with StoreZipReader(path) as r:
        assert bytes(r.view("big")) == b"x" * 1000


def test_views_are_zero_copy_and_read_only(tmp_path):
    with StoreZipReader(make_ours(tmp_path / "a.bin")) as r:
        v = r.view("mha.out_proj.weight")
        assert v.readonly and isinstance(v.obj, object)
        arr = np.frombuffer(v, dtype=np.float32)
        assert arr.tolist() == [0, 1, 2, 3, 4, 5] and not arr.flags.writeable
        assert not arr.flags.owndata


def test_views_survive_close(tmp_path):
    r = StoreZipReader(make_ours(tmp_path / "a.bin"))
    v = r.view("conv.bias")
    r.close()
    assert bytes(v) == b"\x01\x02\x03"
    with pytest.raises(BinArchiveError, match="closed"):
        r.view("conv.bias")


def test_writer_output_reads_back_with_python_zipfile(tmp_path):
    path = make_ours(tmp_path / "a.bin")
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        assert z.namelist() == list(ENTRIES)
        for name, data in ENTRIES.items():
            assert z.read(name) == data
            assert z.getinfo(name).compress_type == zipfile.ZIP_STORED


def test_writer_layout_is_pnnx_layout(tmp_path):
    data = make_ours(tmp_path / "a.bin", {"w": b"abcd"}).read_bytes()
    # local header: version 0, no flags, stored, no time/date, crc, sizes in a zip64 extra
    sig, ver, flag, method, time, date, crc, csize, usize, nlen, xlen = struct.unpack_from("<4sHHHHHIIIHH", data)
    assert (sig, ver, flag, method, time, date) == (b"PK\x03\x04", 0, 0, 0, 0, 0)
    assert (csize, usize, nlen, xlen) == (0xFFFFFFFF, 0xFFFFFFFF, 1, 32)
    assert struct.unpack_from("<HHQQQI", data, 31) == (1, 28, 4, 4, 0, 0)
    assert data[63:67] == b"abcd"
    # end of central directory: every field saturated, zip64 records before it
    assert data[-22:] == b"PK\x05\x06" + b"\xff" * 16 + b"\0\0"
    assert data[-42:-38] == b"PK\x06\x07"


def test_empty_archive(tmp_path):
    make_ours(tmp_path / "a.bin", {})
    with StoreZipReader(tmp_path / "a.bin") as r:
        assert r.names() == []


def test_writer_refuses_duplicates_and_bad_names(tmp_path):
    with StoreZipWriter(tmp_path / "a.bin") as w:
        w.write_file("a", b"1")
        with pytest.raises(BinArchiveError, match="twice"):
            w.write_file("a", b"2")
        with pytest.raises(BinArchiveError, match="invalid entry name"):
            w.write_file("", b"2")


def test_writer_accepts_numpy_buffers(tmp_path):
    w = np.arange(4, dtype=np.int64).reshape(2, 2)
    make_ours(tmp_path / "a.bin", {"w": w})
    with StoreZipReader(tmp_path / "a.bin") as r:
        assert bytes(r.view("w")) == w.tobytes()


# ---------------------------------------------------------------- refusals, naming the problem

def assert_refused(path, needle):
    with pytest.raises(BinArchiveError) as info:
        StoreZipReader(path)
    assert info.value.path == str(path)
    assert needle in info.value.reason


def test_refuses_compressed_entries_naming_them(tmp_path):
    path = make_zipfile(tmp_path / "a.zip", {"ok": b"1", "conv.weight": b"0" * 100}, zipfile.ZIP_DEFLATED)
    assert_refused(path, "'ok' is compressed (method 8)")


def test_refuses_non_zip_files(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"7767517\n" * 10)
    assert_refused(tmp_path / "a.bin", "not a zip archive")


def test_refuses_tiny_and_empty_files(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"")
    assert_refused(tmp_path / "a.bin", "only 0 bytes")


def test_refuses_missing_file(tmp_path):
    assert_refused(tmp_path / "absent.bin", "cannot open")


def test_refuses_truncated_files(tmp_path):
    data = make_ours(tmp_path / "a.bin").read_bytes()
    for cut in (30, len(data) // 2, len(data) - 1):
        (tmp_path / "t.bin").write_bytes(data[:cut])
        assert_refused(tmp_path / "t.bin", "truncated")


def test_refuses_entry_whose_data_runs_past_the_end(tmp_path):
    data = bytearray(make_ours(tmp_path / "a.bin", {"w": b"abcd"}).read_bytes())
    cd = data.index(b"PK\x01\x02")
    struct.pack_into("<Q", data, cd + 46 + 1 + 4, 1 << 20)  # the zip64 sizes in the central record
    struct.pack_into("<Q", data, cd + 46 + 1 + 12, 1 << 20)
    (tmp_path / "b.bin").write_bytes(data)
    assert_refused(tmp_path / "b.bin", "entry 'w': its 1048576 bytes of data")


def test_refuses_directory_pointing_past_the_end(tmp_path):
    data = bytearray(make_ours(tmp_path / "a.bin").read_bytes())
    eocd64 = data.rindex(b"PK\x06\x06")
    struct.pack_into("<Q", data, eocd64 + 48, 1 << 30)  # central directory offset
    (tmp_path / "b.bin").write_bytes(data)
    assert_refused(tmp_path / "b.bin", "central directory")


def test_refuses_corrupt_local_header(tmp_path):
    data = bytearray(make_ours(tmp_path / "a.bin").read_bytes())
    data[0:4] = b"XXXX"
    (tmp_path / "b.bin").write_bytes(data)
    assert_refused(tmp_path / "b.bin", "entry 'conv.weight': no local header")


def test_crc_check_names_the_entry(tmp_path):
    data = bytearray(make_ours(tmp_path / "a.bin", {"w": b"abcd"}).read_bytes())
    data[63] ^= 0xFF
    (tmp_path / "b.bin").write_bytes(data)
    with StoreZipReader(tmp_path / "b.bin") as r:
        with pytest.raises(BinArchiveError, match="entry 'w': CRC-32"):
            r.check_crc("w")


def test_unknown_entry(tmp_path):
    with StoreZipReader(make_ours(tmp_path / "a.bin")) as r:
        with pytest.raises(BinArchiveError, match="no entry 'nope'"):
            r.view("nope")
        with pytest.raises(BinArchiveError, match="no entry 'nope'"):
            r.size("nope")


def test_archive_with_a_comment(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w", b"abc")
        z.comment = b"PK\x05\x06 looks like a record but is a comment"
    with StoreZipReader(path) as r:
        assert bytes(r.view("w")) == b"abc"
