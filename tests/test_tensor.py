"""Tests of kuiperinfer.tensor.Tensor, KuiperInfer's Tensor<float> over a NumPy array."""

from __future__ import annotations

import numpy as np
import pytest

from kuiperinfer.errors import KuiperError, TensorError
from kuiperinfer.tensor import Tensor, TensorCopyError


def arange(*shape: int) -> Tensor:
    return Tensor.from_numpy(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))


# ------------------------------------------------------------------ constructors
@pytest.mark.parametrize("args, shape", [
    ((5,), (5,)),
    ((2, 3), (2, 3)),
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4, 5), (2, 3, 4, 5)),
    (([3, 4],), (3, 4)),
    (((1, 2, 3),), (1, 2, 3)),
    ((np.array([2, 2]),), (2, 2)),
    ((np.int64(3), np.int32(2)), (3, 2)),
])
def test_constructor_forms_make_zeros(args, shape):
    t = Tensor(*args)
    assert t.shape == shape
    assert t.raw_shapes() == list(shape)
    assert t.dtype == np.float32
    assert not t.numpy().any()
    assert t.numpy().flags.c_contiguous


@pytest.mark.parametrize("args", [(), ([],), ((1, 2, 3, 4, 5),), (1, 2, 3, 4, 5)])
def test_constructor_rejects_wrong_number_of_dims(args):
    with pytest.raises(TensorError, match="1 to 4 dimensions"):
        Tensor(*args)


@pytest.mark.parametrize("args", [(-1,), (2, -3), ([1, -1],)])
def test_constructor_rejects_negative_dims(args):
    with pytest.raises(TensorError, match="non-negative"):
        Tensor(*args)


@pytest.mark.parametrize("args", [(2.0,), (True,), ("3",), ([2, 1.5],), (None,), (np.zeros(2),)])
def test_constructor_rejects_non_integer_dims(args):
    with pytest.raises(TensorError):
        Tensor(*args)


def test_tensor_error_is_a_kuiper_error():
    with pytest.raises(KuiperError):
        Tensor(-1)


# ------------------------------------------------------------------ queries
@pytest.mark.parametrize("shape, b, c, r, k", [
    ((7,), 1, 1, 1, 7),
    ((3, 7), 1, 1, 3, 7),
    ((2, 3, 7), 1, 2, 3, 7),
    ((4, 2, 3, 7), 4, 2, 3, 7),
])
def test_queries_follow_the_cube_view(shape, b, c, r, k):
    t = Tensor(shape)
    assert (t.batch(), t.channels(), t.rows(), t.cols()) == (b, c, r, k)
    assert t.shapes() == [c, r, k]
    assert t.size() == b * c * r * k
    assert t.ndim == len(shape)
    assert not t.empty()


def test_empty_tensor():
    t = Tensor(2, 0)
    assert t.empty()
    assert t.size() == 0
    assert t.values().size == 0


def test_tensor_has_no_len_and_is_not_iterable():
    t = Tensor(3)
    with pytest.raises(TypeError):
        len(t)
    with pytest.raises(TypeError):
        iter(t)


def test_repr_shows_values_and_shape():
    text = repr(arange(2, 2))
    assert text.startswith("Tensor(")
    assert "3." in text and "shape=(2, 2)" in text


# ------------------------------------------------------------------ NumPy bridge
def test_from_numpy_wraps_float32_c_contiguous_without_copy():
    arr = np.ones((2, 3), dtype=np.float32)
    t = Tensor.from_numpy(arr)
    assert t.numpy() is arr
    t.set_at(0, 1, 2, value=5.0)
    assert arr[1, 2] == 5.0


@pytest.mark.parametrize("arr", [
    np.arange(6, dtype=np.float64).reshape(2, 3),
    np.arange(6, dtype=np.int32).reshape(2, 3),
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    np.arange(12, dtype=np.float32).reshape(3, 4)[:, :3][:2],
    np.arange(6, dtype=">f4").reshape(2, 3),
])
def test_from_numpy_converts_other_arrays_once(arr):
    t = Tensor.from_numpy(arr)
    assert not np.shares_memory(t.numpy(), arr)
    assert t.dtype == np.float32 and t.numpy().flags.c_contiguous
    np.testing.assert_array_equal(t.numpy(), arr)


def test_from_numpy_copies_read_only_arrays():
    arr = np.zeros(3, dtype=np.float32)
    arr.flags.writeable = False
    t = Tensor.from_numpy(arr)
    t.ones()
    assert not arr.any()


def test_from_numpy_accepts_nested_lists():
    np.testing.assert_array_equal(Tensor.from_numpy([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])


@pytest.mark.parametrize("bad", [
    np.float32(1.0), np.zeros((1, 1, 1, 1, 1)), np.array(["1"]), np.array([1 + 2j]), [[1, 2], [3]], None,
])
def test_from_numpy_rejects_bad_input(bad):
    with pytest.raises(TensorError):
        Tensor.from_numpy(bad)


def test_numpy_and_data_are_the_same_array():
    t = Tensor(2, 2)
    assert t.numpy() is t.data()


def test_asarray_is_zero_copy():
    t = Tensor(2, 3)
    assert np.asarray(t) is t.numpy()
    assert np.shares_memory(np.asarray(t, dtype=np.float32), t.numpy())


def test_array_copy_true_copies():
    t = arange(3)
    c = np.array(t, copy=True)
    assert not np.shares_memory(c, t.numpy())
    np.testing.assert_array_equal(c, [0, 1, 2])


def test_array_with_other_dtype_converts():
    out = np.asarray(arange(3), dtype=np.float64)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [0, 1, 2])


def test_array_copy_false_with_other_dtype_raises():
    with pytest.raises(TensorCopyError):
        np.asarray(arange(3), dtype=np.float64, copy=False)
    assert issubclass(TensorCopyError, ValueError) and issubclass(TensorCopyError, TensorError)


def test_numpy_functions_accept_a_tensor():
    assert np.sum(arange(2, 3)) == 15


def test_set_data_wraps_same_shape():
    t = Tensor(2, 2)
    arr = np.full((2, 2), 3, dtype=np.float32)
    t.set_data(arr)
    assert t.numpy() is arr


def test_set_data_rejects_other_shape():
    with pytest.raises(TensorError, match="differs"):
        Tensor(2, 2).set_data(np.zeros((4,), dtype=np.float32))


# ------------------------------------------------------------------ element access
def test_index_is_row_major_offset():
    t = arange(2, 3)
    assert [t.index(i) for i in range(6)] == [0, 1, 2, 3, 4, 5]
    assert isinstance(t.index(0), float)


def test_set_index():
    t = Tensor(2, 3)
    t.set_index(4, 9.5)
    assert t.numpy()[1, 1] == 9.5


@pytest.mark.parametrize("offset", [-1, 6, 100])
def test_index_out_of_range(offset):
    with pytest.raises(TensorError, match="out of range"):
        arange(2, 3).index(offset)
    with pytest.raises(TensorError, match="out of range"):
        arange(2, 3).set_index(offset, 1.0)


def test_index_rejects_float_offset():
    with pytest.raises(TensorError, match="integer"):
        arange(3).index(1.0)


def test_at_on_3d():
    t = arange(2, 3, 4)
    assert t.at(1, 2, 3) == 23
    assert t.at(0, 1, 0) == 4


def test_at_on_1d_and_2d_uses_channel_and_row_zero():
    assert arange(5).at(0, 0, 3) == 3
    assert arange(2, 3).at(0, 1, 2) == 5


def test_at_on_4d_takes_batch_first():
    t = arange(2, 2, 3, 4)
    assert t.at(1, 0, 2, 3) == t.numpy()[1, 0, 2, 3] == 35


def test_set_at_3d_and_4d():
    t3 = Tensor(2, 3, 4)
    t3.set_at(1, 2, 3, value=7)
    assert t3.numpy()[1, 2, 3] == 7
    t4 = Tensor(2, 2, 3, 4)
    t4.set_at(1, 1, 0, 2, value=-1.5)
    assert t4.numpy()[1, 1, 0, 2] == -1.5


@pytest.mark.parametrize("coords, message", [
    ((2, 0, 0), "channel index 2"),
    ((0, 3, 0), "row index 3"),
    ((0, 0, 4), "col index 4"),
    ((-1, 0, 0), "channel index -1"),
    ((0, 0), "got 2 indices"),
    ((0, 0, 0, 0), "got 4 indices"),
])
def test_at_errors_on_3d(coords, message):
    with pytest.raises(TensorError, match=message):
        arange(2, 3, 4).at(*coords)


def test_at_errors_on_4d_and_1d():
    with pytest.raises(TensorError, match="batch index 2"):
        arange(2, 1, 1, 1).at(2, 0, 0, 0)
    with pytest.raises(TensorError, match="channel index 1"):
        arange(5).at(1, 0, 0)
    with pytest.raises(TensorError, match="row index 1"):
        arange(5).at(0, 1, 0)


def test_set_at_rejects_non_number():
    with pytest.raises(TensorError, match="number"):
        Tensor(1, 1, 1).set_at(0, 0, 0, value="x")


def test_getitem_is_numpy_indexing_with_views():
    t = arange(2, 3)
    row = t[1]
    assert np.shares_memory(row, t.numpy())
    np.testing.assert_array_equal(row, [3, 4, 5])
    assert t[0, 2] == 2


def test_setitem_writes_through():
    t = Tensor(2, 3)
    t[:, 1] = [5, 6]
    np.testing.assert_array_equal(t.numpy(), [[0, 5, 0], [0, 6, 0]])


@pytest.mark.parametrize("key", [(5, 0), (0, 0, 0), "a"])
def test_getitem_errors_are_tensor_errors(key):
    with pytest.raises(TensorError):
        arange(2, 3)[key]


def test_setitem_shape_mismatch_is_tensor_error():
    t = Tensor(2, 3)
    with pytest.raises(TensorError):
        t[0] = [1, 2]


def test_slice_is_a_zero_copy_channel_matrix():
    t = arange(2, 3, 4)
    s = t.slice(1)
    assert s.shape == (3, 4)
    assert np.shares_memory(s, t.numpy())
    s[0, 0] = -1
    assert t.at(1, 0, 0) == -1


def test_slice_of_1d_and_2d_and_4d():
    t1 = arange(5)
    assert t1.slice(0).shape == (1, 5)
    assert np.shares_memory(t1.slice(0), t1.numpy())
    t2 = arange(2, 3)
    assert np.shares_memory(t2.slice(0), t2.numpy())
    np.testing.assert_array_equal(t2.slice(0), t2.numpy())
    t4 = arange(2, 3, 2, 2)
    np.testing.assert_array_equal(t4.slice(1, 2), t4.numpy()[1, 2])


@pytest.mark.parametrize("tensor, where, message", [
    (arange(2, 3, 4), (2,), "channel index 2"),
    (arange(2, 3), (1,), "channel index 1"),
    (arange(2, 3, 4), (0, 0), r"takes \(channel\)"),
    (arange(2, 2, 1, 1), (0,), r"takes \(batch, channel\)"),
    (arange(2, 2, 1, 1), (2, 0), "batch index 2"),
])
def test_slice_errors(tensor, where, message):
    with pytest.raises(TensorError, match=message):
        tensor.slice(*where)


# ------------------------------------------------------------------ fill / values
def test_fill_scalar_returns_self():
    t = Tensor(2, 2)
    assert t.fill(2.5) is t
    assert (t.numpy() == 2.5).all()


def test_fill_row_major_by_hand():
    t = Tensor(2, 2, 3).fill([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    np.testing.assert_array_equal(t.slice(0), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(t.slice(1), [[6, 7, 8], [9, 10, 11]])


def test_fill_column_major_by_hand():
    # KuiperInfer's arma layout: per channel, column by column.
    t = Tensor(2, 2, 3).fill([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], row_major=False)
    np.testing.assert_array_equal(t.slice(0), [[0, 2, 4], [1, 3, 5]])
    np.testing.assert_array_equal(t.slice(1), [[6, 8, 10], [7, 9, 11]])


def test_fill_column_major_on_4d_goes_batch_by_batch():
    t = Tensor(2, 1, 2, 2).fill(range(8), row_major=False)
    np.testing.assert_array_equal(t.numpy()[0, 0], [[0, 2], [1, 3]])
    np.testing.assert_array_equal(t.numpy()[1, 0], [[4, 6], [5, 7]])


def test_fill_keeps_the_buffer():
    t = Tensor(2, 3)
    arr = t.numpy()
    t.fill(np.arange(6), row_major=False)
    assert t.numpy() is arr


def test_fill_accepts_any_shape_of_exact_size():
    t = Tensor(2, 3).fill(np.arange(6).reshape(3, 2))
    np.testing.assert_array_equal(t.values(), range(6))


@pytest.mark.parametrize("values", [[1, 2, 3], np.zeros(7), []])
def test_fill_size_mismatch(values):
    with pytest.raises(TensorError, match="exactly 6 values"):
        Tensor(2, 3).fill(values)


@pytest.mark.parametrize("values", ["abc", ["a", "b"], [[1, 2], [3]], None])
def test_fill_rejects_non_numbers(values):
    with pytest.raises(TensorError):
        Tensor(2).fill(values)


def test_values_row_and_column_major_by_hand():
    t = arange(2, 2, 3)  # channel 0 = [[0,1,2],[3,4,5]], channel 1 = [[6,7,8],[9,10,11]]
    np.testing.assert_array_equal(t.values(), range(12))
    np.testing.assert_array_equal(t.values(row_major=False), [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11])


def test_values_is_a_flat_copy():
    for t in (arange(2, 3), arange(4)):
        for row_major in (True, False):
            v = t.values(row_major)
            assert v.ndim == 1 and v.dtype == np.float32
            assert not np.shares_memory(v, t.numpy())


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4), (2, 2, 3, 4)])
def test_fill_inverts_values_in_both_orders(shape):
    src = Tensor(shape).rand(seed=1)
    for row_major in (True, False):
        back = Tensor(shape).fill(src.values(row_major), row_major)
        np.testing.assert_array_equal(back.numpy(), src.numpy())


def test_ones():
    t = Tensor(2, 2)
    assert t.ones() is t
    assert (t.numpy() == 1).all()


def test_rand_is_seeded_in_place_and_normal():
    t = Tensor(100, 100)
    arr = t.numpy()
    assert t.rand(seed=3) is t and t.numpy() is arr
    np.testing.assert_array_equal(arr, Tensor(100, 100).rand(seed=3).numpy())
    assert abs(arr.mean()) < 0.05 and abs(arr.std() - 1) < 0.05
    assert (arr < 0).any()


def test_rand_uniform():
    arr = Tensor(100, 100).rand(seed=0, uniform=True).numpy()
    assert arr.min() >= 0 and arr.max() < 1
    assert abs(arr.mean() - 0.5) < 0.05


def test_rand_without_seed_differs():
    assert not np.array_equal(Tensor(50).rand().numpy(), Tensor(50).rand().numpy())


# ------------------------------------------------------------------ transform
def test_transform_vectorised_in_place():
    t = Tensor.from_numpy(np.array([-1.0, 0.5, 2.0], dtype=np.float32))
    arr = t.numpy()
    assert t.transform(lambda x: np.maximum(x, 0)) is t
    assert t.numpy() is arr
    np.testing.assert_array_equal(arr, [0, 0.5, 2])


def test_transform_elementwise_scalar_function():
    t = arange(2, 2).transform(lambda v: v if v > 1 else -v, elementwise=True)
    np.testing.assert_array_equal(t.numpy(), [[0, -1], [2, 3]])


def test_transform_scalar_function_without_flag_hints():
    with pytest.raises(TensorError, match="elementwise=True"):
        arange(3).transform(lambda v: v if v > 1 else 0)


def test_transform_wrong_shape():
    with pytest.raises(TensorError, match="shape"):
        arange(2, 3).transform(lambda x: x.sum(axis=0))


# ------------------------------------------------------------------ reshape / flatten
def test_reshape_row_major_is_numpy_reshape_on_the_same_buffer():
    t = arange(2, 3, 4)
    arr = t.numpy()
    assert t.reshape([4, 6]) is t
    assert t.raw_shapes() == [4, 6]
    assert np.shares_memory(t.numpy(), arr)
    np.testing.assert_array_equal(t.numpy(), np.arange(24).reshape(4, 6))


def test_reshape_column_major_2d_by_hand():
    # [[0,1,2],[3,4,5]] in arma memory is 0,3,1,4,2,5; laid out column-wise in 3x2.
    t = arange(2, 3).reshape([3, 2], row_major=False)
    np.testing.assert_array_equal(t.numpy(), [[0, 4], [3, 2], [1, 5]])


def test_reshape_column_major_3d_to_2d_by_hand():
    # channels [[0,1],[2,3]] and [[4,5],[6,7]]: memory 0,2,1,3,4,6,5,7 -> 2x4 column-wise.
    t = arange(2, 2, 2).reshape([2, 4], row_major=False)
    np.testing.assert_array_equal(t.numpy(), [[0, 1, 4, 5], [2, 3, 6, 7]])


def test_reshape_column_major_keeps_buffer_and_column_major_values():
    t = arange(2, 3, 4)
    arr, before = t.numpy(), t.values(row_major=False)
    t.reshape([3, 2, 4], row_major=False)
    assert np.shares_memory(t.numpy(), arr)
    np.testing.assert_array_equal(t.values(row_major=False), before)


def test_reshape_to_and_from_4d():
    t = arange(2, 3, 4).reshape([2, 1, 3, 4])
    assert (t.batch(), t.shapes()) == (2, [1, 3, 4])
    assert t.reshape([24]).shape == (24,)


@pytest.mark.parametrize("shapes, message", [
    ([5, 5], "cannot reshape 24"),
    ([], "1 to 4"),
    ([1, 1, 1, 2, 12], "1 to 4"),
    ([-4, -6], "non-negative"),
    (7, "sequence"),
    ([2.0, 12], "integer"),
])
def test_reshape_errors(shapes, message):
    with pytest.raises(TensorError, match=message):
        arange(2, 3, 4).reshape(shapes)


def test_flatten_row_major():
    t = arange(2, 2, 2)
    assert t.flatten() is t
    assert t.raw_shapes() == [8] and t.shapes() == [1, 1, 8]
    np.testing.assert_array_equal(t.numpy(), range(8))


def test_flatten_column_major_by_hand():
    t = arange(2, 2, 2).flatten(row_major=False)
    np.testing.assert_array_equal(t.numpy(), [0, 2, 1, 3, 4, 6, 5, 7])


# ------------------------------------------------------------------ padding
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (2, 2, 3, 4)])
def test_padding_matches_np_pad(shape):
    t = arange(*shape)
    expected = np.pad(t.numpy(), [(0, 0)] * (len(shape) - 2) + [(1, 2), (3, 0)], constant_values=-7)
    assert t.padding([1, 2, 3, 0], -7) is t
    np.testing.assert_array_equal(t.numpy(), expected)
    assert t.dtype == np.float32 and t.numpy().flags.c_contiguous


def test_padding_by_hand_and_updates_shapes():
    t = Tensor(1, 1, 1).fill(5).padding([1, 0, 0, 1])
    assert t.shapes() == [1, 2, 2]
    np.testing.assert_array_equal(t.slice(0), [[0, 0], [5, 0]])


def test_padding_1d_pads_columns_only():
    t = arange(2).padding([0, 0, 1, 1], 9)
    np.testing.assert_array_equal(t.numpy(), [9, 0, 1, 9])
    with pytest.raises(TensorError, match="no rows"):
        arange(2).padding([1, 0, 0, 0])


@pytest.mark.parametrize("pads, message", [
    ([1, 1, 1], "up, bottom, left, right"),
    ("abcd", "up, bottom, left, right"),
    ([1, -1, 0, 0], "non-negative"),
    ([1, 1.5, 0, 0], "integer"),
])
def test_padding_errors(pads, message):
    with pytest.raises(TensorError, match=message):
        Tensor(2, 2).padding(pads)


def test_padding_value_must_be_a_number():
    with pytest.raises(TensorError, match="number"):
        Tensor(2, 2).padding([1, 1, 1, 1], "x")


# ------------------------------------------------------------------ clone / show
def test_clone_is_deep():
    t = arange(2, 3)
    c = t.clone()
    assert not np.shares_memory(c.numpy(), t.numpy())
    c.ones()
    assert t.at(0, 0, 0) == 0 and c.shape == t.shape


def test_show_prints_channel_by_channel(capsys):
    text = arange(2, 1, 2).show()
    assert capsys.readouterr().out.strip() == text
    assert text == "Channel: 0\n[[0. 1.]]\nChannel: 1\n[[2. 3.]]"


def test_show_4d_names_batch():
    text = Tensor(2, 1, 1, 1).show()
    assert "Batch: 1, Channel: 0" in text


# ------------------------------------------------------------------ CSV
def test_save_csv_2d_is_the_plain_matrix(tmp_path):
    p = tmp_path / "w.csv"
    Tensor.from_numpy([[1, 2.5], [-3, 1e-5]]).save_csv(p)
    assert p.read_text() == "1,2.5\n-3,9.99999975e-06\n"


def test_save_csv_1d_is_one_row(tmp_path):
    p = tmp_path / "b.csv"
    arange(3).save_csv(p)
    assert p.read_text() == "0,1,2\n"
    assert Tensor.load_csv(p).shape == (1, 3)


def test_save_csv_3d_separates_channels_by_an_empty_line(tmp_path):
    p = tmp_path / "c.csv"
    arange(2, 1, 2).save_csv(p)
    assert p.read_text() == "0,1\n\n2,3\n"


def test_save_csv_4d_separates_batches_by_two_empty_lines(tmp_path):
    p = tmp_path / "d.csv"
    arange(2, 2, 1, 1).save_csv(p)
    assert p.read_text() == "0\n\n1\n\n\n2\n\n3\n"


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (2, 3, 1, 4), (1, 1)])
def test_csv_round_trip_is_exact(tmp_path, shape):
    t = Tensor(shape).rand(seed=7)
    p = tmp_path / "t.csv"
    t.save_csv(p)
    back = Tensor.load_csv(p)
    assert back.shape == shape
    np.testing.assert_array_equal(back.numpy(), t.numpy())


def test_csv_drops_leading_ones(tmp_path):
    p = tmp_path / "t.csv"
    arange(1, 2, 3).save_csv(p)
    assert Tensor.load_csv(p).shape == (2, 3)


def test_load_csv_reads_a_kuiperinfer_matrix(tmp_path):
    p = tmp_path / "k.csv"
    p.write_text("1, 2,3\r\n4,5 ,6\r\n\r\n")
    t = Tensor.load_csv(str(p))
    np.testing.assert_array_equal(t.numpy(), [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("text, message", [
    ("1,2\n3\n", r":2: 1 values, but the first row has 2"),
    ("1,2\n3,x\n", r":2: cell 2 is not a number: 'x'"),
    ("1,,2\n", r":1: cell 2 is not a number"),
    ("1,2,\n", r":1: cell 3 is not a number"),
    ("print(1)\n", r":1: cell 1 is not a number"),
    ("", "no data"),
    ("\n\n", "no data"),
    ("\n1,2\n", r":1: the file starts with an empty line"),
    ("1\n\n\n\n2\n", r":5: more than two empty lines"),
    ("1\n2\n\n3\n", r":4: a matrix of 1 rows, but the first has 2"),
    ("1\n\n2\n\n\n3\n", r":6: a cube of 1 channels, but the first has 2"),
])
def test_load_csv_errors_name_file_and_line(tmp_path, text, message):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(TensorError, match=message) as info:
        Tensor.load_csv(p)
    assert str(p) in str(info.value)


def test_load_csv_missing_file(tmp_path):
    p = tmp_path / "missing.csv"
    with pytest.raises(TensorError, match="missing.csv: cannot read"):
        Tensor.load_csv(p)


def test_load_csv_binary_file(tmp_path):
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(TensorError, match="cannot read"):
        Tensor.load_csv(p)


def test_save_csv_errors(tmp_path):
    with pytest.raises(TensorError, match="empty"):
        Tensor(0).save_csv(tmp_path / "e.csv")
    with pytest.raises(TensorError, match="cannot write"):
        Tensor(1).save_csv(tmp_path / "no_dir" / "x.csv")
