"""kuiperinfer.ray and ``kuiper classify|run --ray`` on local Ray clusters the tests start.

The module's tests share one cluster of 2 CPUs (this machine's); one test runs the
command in a process of its own, which starts and stops its own cluster. Afterwards no
process of either cluster may be left: every process Ray starts inherits the
environment of the one that started the cluster, so a variable set there finds them.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import ray.data
from cli_runner import DEMO, run
from handmade import write_model
from PIL import Image
from ray.data.extensions import ArrowTensorArray

import kuiperinfer
import kuiperinfer.ray as kray
from kuiperinfer.models import sample_images
from kuiperinfer.vision import Classifier

pytestmark = pytest.mark.timeout(300)   # a pipeline whose reads cannot be scheduled waits for ever

MARK = "KUIPER_RAY_TEST_CLUSTER"
TWO_INPUTS = """7767517
4 3
pnnx.Input               a                        0 1 0 #0=(1,3)f32
pnnx.Input               b                        0 1 1 #1=(1,3)f32
pnnx.Expression          add                      2 1 0 1 2 expr=add(@0,mul(@1,2)) #0=(1,3)f32 #1=(1,3)f32 #2=(1,3)f32
pnnx.Output              out                      1 0 2 #2=(1,3)f32
"""


def processes_marked(value: str) -> list[int]:
    """The processes (other than this one) whose environment has MARK=value."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if f"{MARK}={value}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:   # gone meanwhile, or not ours to read
            continue
    return found


def leftover_processes(value: str, wait: float = 20.0) -> list[int]:
    """The processes still marked ``value`` once they have had ``wait`` seconds to exit."""
    deadline = time.monotonic() + wait
    while (alive := processes_marked(value)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


@pytest.fixture(scope="module")
def cluster():
    """A local cluster of 2 CPUs for the module; none of its processes outlives it."""
    value = uuid.uuid4().hex
    os.environ[MARK] = value
    try:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    finally:
        del os.environ[MARK]
    ray.data.DataContext.get_current().enable_progress_bars = False
    assert processes_marked(value), "the cluster's processes should carry the mark"
    yield
    ray.shutdown()
    assert leftover_processes(value) == []


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """The bundled photos and variants of them (turned by EXIF, grey PNG, RGBA PNG)."""
    folder = tmp_path_factory.mktemp("photos")
    car, plane = sample_images()
    shutil.copy(car, folder / "car.jpg")
    shutil.copy(plane, folder / "plane.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6
    with Image.open(car) as image:
        image.save(folder / "car_turned.jpg", exif=exif)
    with Image.open(plane) as image:
        image.convert("L").save(folder / "plane_grey.png")
        image.convert("RGBA").save(folder / "plane_rgba.png")
    return folder


@pytest.fixture(scope="module")
def with_broken(photos, tmp_path_factory) -> Path:
    """The photos and three files that do not decode: text, a truncated JPEG, random bytes."""
    folder = tmp_path_factory.mktemp("with_broken")
    for photo in photos.iterdir():
        shutil.copy(photo, folder / photo.name)
    (folder / "notes.png").write_text("not a picture")
    (folder / "truncated.jpg").write_bytes((photos / "car.jpg").read_bytes()[:4000])
    (folder / "noise.jpg").write_bytes(np.random.default_rng(0).bytes(5000))
    return folder


BROKEN = {"notes.png", "truncated.jpg", "noise.jpg"}


@pytest.fixture(scope="module")
def single_machine(photos) -> dict[str, list]:
    """What Classifier (kuiper classify without --ray) finds in each photo, top 5, by name."""
    results = Classifier.bundled().classify(sorted(photos.iterdir()), top_k=5)
    return {Path(r.source).name: r.predictions for r in results}


def assert_same_predictions(row: dict, expected: list) -> None:
    assert row["labels"] == [p.label for p in expected]
    assert row["indices"] == [p.index for p in expected]
    np.testing.assert_allclose(row["probabilities"], [p.probability for p in expected], rtol=0, atol=2e-6)


# -- without a cluster --------------------------------------------------------------------

def test_the_core_package_and_the_commands_import_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import kuiperinfer, kuiperinfer.vision, kuiperinfer.cli.classify, kuiperinfer.cli.run\n"
            "from kuiperinfer.cli import main\n"
            "sys.exit(main(['classify', '--ray']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        ("kuiper classify: error: --ray needs Ray Data (import of ray halted; None in sys.modules): "
         "pip install 'kuiperinfer[ray]'")]


def test_image_classifier_on_encoded_files_and_on_decoded_pixels(photos, single_machine):
    """The callable itself, as an actor calls it: ``bytes`` from read_binary_files, or the
    ``image`` arrays read_images gives (decoded pixels, taken the way they are stored)."""
    classify = kray.ImageClassifier(top_k=5, threads=1)
    names = sorted(p.name for p in photos.iterdir())
    files = {"path": object_column(names), "bytes": object_column([(photos / n).read_bytes() for n in names])}
    table = classify(files)
    assert table.column_names == ["path", "labels", "indices", "probabilities", "error"]
    for row in table.to_pylist():
        assert row["error"] is None
        assert_same_predictions(row, single_machine[row["path"]])

    pixels = [np.asarray(Image.open(photos / n).convert("RGB")) for n in names]
    table = classify({"path": object_column(names), "image": object_column(pixels)})
    expected = Classifier.bundled().classify(pixels, top_k=5)
    for row, result in zip(table.to_pylist(), expected):
        assert_same_predictions(row, result.predictions)


def object_column(values: list) -> np.ndarray:
    """A batch column of one object per row, as Ray hands over strings, bytes or ragged arrays."""
    column = np.empty(len(values), dtype=object)
    for row, value in enumerate(values):
        column[row] = value
    return column


def test_predictor_stacks_nested_lists_and_keeps_the_other_columns():
    predict = kray.Predictor(DEMO, threads=1)
    rows = np.random.default_rng(1).standard_normal((3, 3, 64, 64)).astype(np.float32)
    as_lists = pa.array([row.tolist() for row in rows]).to_numpy(zero_copy_only=False)   # as Ray converts
    assert as_lists.dtype == object and as_lists.shape == (3,)
    out = predict({"id": np.arange(3), "pnnx_input_0": as_lists})
    graph = kuiperinfer.load(DEMO, threads=1)
    assert list(out) == ["id", *graph.output_names]
    np.testing.assert_array_equal(out["id"], np.arange(3))
    np.testing.assert_allclose(out[graph.output_names[0]], graph.run(rows)[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_predictor_runs_the_precision_asked_for(tmp_path, precision):
    rows = np.random.default_rng(2).standard_normal((4, 3, 64, 64)).astype(np.float32)
    calibration = None
    if precision == "int8":
        np.save(tmp_path / "calibrate.npy", rows[:2])
        calibration = tmp_path / "demo.table"
        kuiperinfer.quantize(DEMO, tmp_path / "calibrate.npy", output=calibration)
    predict = kray.Predictor(DEMO, threads=1, precision=precision, calibration=calibration)
    graph = kuiperinfer.load(DEMO, threads=1, precision=precision, calibration=calibration)
    name = graph.output_names[0]
    ours = predict({"pnnx_input_0": rows})[name]
    np.testing.assert_array_equal(ours, graph.run(rows)[0])
    assert not np.allclose(ours, kuiperinfer.load(DEMO, threads=1).run(rows)[0], rtol=0, atol=1e-5)


def test_predictor_names_a_missing_column_and_rows_of_unequal_shapes():
    predict = kray.Predictor(DEMO, threads=1)
    with pytest.raises(kuiperinfer.errors.InputError, match=r"no column for the model's input\(s\) "
                                                            r"\['pnnx_input_0'\]; the batch has .*'x'"):
        predict({"x": np.zeros((1, 3, 64, 64), np.float32)})
    ragged = object_column([np.zeros((3, 64, 64)), np.zeros((3, 64, 63))])
    with pytest.raises(kuiperinfer.errors.InputError, match="column 'pnnx_input_0' does not hold arrays of one shape"):
        predict({"pnnx_input_0": ragged})


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_results_file_appears_only_when_complete(tmp_path, suffix):
    path = tmp_path / f"out{suffix}"
    table = pa.table({"path": ["a", "b"], "error": [None, "broken"]})
    with pytest.raises(RuntimeError), kray.ResultsFile(path) as out:
        out.write(table)
        raise RuntimeError("the dataset failed")
    assert list(tmp_path.iterdir()) == []
    with kray.ResultsFile(path) as out:
        out.write(table)
        out.write(table)
    assert out.rows == 4 and [p.name for p in tmp_path.iterdir()] == [path.name]
    if suffix == ".parquet":
        assert pq.read_table(path).to_pylist() == table.to_pylist() * 2
    else:
        assert [json.loads(line) for line in path.read_text().splitlines()] == table.to_pylist() * 2
    with pytest.raises(ValueError, match=r"write \.parquet or \.jsonl"):
        kray.ResultsFile(tmp_path / "out.csv")


# -- a command that starts its own cluster -----------------------------------------------

def test_the_command_starts_a_cluster_and_leaves_no_process_behind(with_broken, single_machine, tmp_path):
    value = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {MARK: value}
    output = tmp_path / "results.jsonl"
    command = [sys.executable, "-m", "kuiperinfer.cli", "classify", str(with_broken), "--ray", "--actors", "2",
               "-b", "2", "--output", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote 8 rows to {output}\n"
    assert "warning: 3 of 8 images could not be read; the error column says why" in result.stderr
    rows = {Path(row["path"]).name: row for row in map(json.loads, output.read_text().splitlines())}
    assert set(rows) == set(single_machine) | BROKEN
    for name, expected in single_machine.items():
        assert_same_predictions(rows[name], expected)
    assert leftover_processes(value) == []


# -- on the shared cluster ---------------------------------------------------------------

def test_actor_cpus_divide_the_node_and_set_the_threads(cluster):
    assert kray.node_cpus() == [2] and kray.default_actors() == 1
    assert [kray.actor_cpus(n) for n in (1, 2)] == [2, 1]
    with pytest.raises(ValueError, match="3 actors need a CPU each, and the Ray cluster has 2"):
        kray.actor_cpus(3)

    @ray.remote
    class Probe:
        """Reports the model's threads, and BLAS's threads here and in another thread (where
        Ray Data calls the batches)."""

        def threads(self):
            from concurrent.futures import ThreadPoolExecutor

            from threadpoolctl import threadpool_info

            def blas_threads():
                return {pool["num_threads"] for pool in threadpool_info()}

            graph = kray.Predictor(DEMO).graph
            with ThreadPoolExecutor(1) as other:
                return graph.threads, blas_threads(), other.submit(blas_threads).result()

    for cpus in (1, 2):
        probe = Probe.options(num_cpus=cpus).remote()
        assert ray.get(probe.threads.remote()) == (cpus, {1}, {1})
        ray.kill(probe)


@pytest.mark.parametrize("actors", [1, 2])
def test_classify_matches_single_machine_and_reports_each_broken_file(cluster, with_broken, single_machine, actors):
    images = kray.read_image_files(str(with_broken))
    rows = kray.classify(images, actors=actors, batch_size=3, top_k=5).take_all()
    by_name = {Path(row["path"]).name: row for row in rows}
    assert len(rows) == 8 and set(by_name) == set(single_machine) | BROKEN
    for name, expected in single_machine.items():
        assert by_name[name]["error"] is None
        assert_same_predictions(by_name[name], expected)
    for name in BROKEN:
        row = by_name[name]
        assert row["error"].startswith("cannot read it as an image (")
        assert row["labels"] is None and row["indices"] is None and row["probabilities"] is None


RAY_LOG = re.compile(r"^(\x1b\[\d+m)?\((pid=|raylet|gcs_server)")
"""A line Ray's log monitor forwards from its own processes to the driver's stdout or stderr,
at any time (a thread or actor of this or a previous run being killed, say)."""


def kuiper(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI run in-process: its exit code, stdout and stderr without Ray's forwarded lines."""
    code, out, err = run(capsys, *args)
    return code, *("".join(line for line in text.splitlines(keepends=True) if not RAY_LOG.match(line))
                   for text in (out, err))


def test_cli_prints_what_single_machine_classify_prints(cluster, capsys, photos):
    code, alone, err = kuiper(capsys, "classify", str(photos), "--json", "-k", "3")
    assert code == 0 and err == ""
    code, on_ray, err = kuiper(capsys, "classify", str(photos), "--json", "-k", "3", "--ray", "--actors", "2",
                               "--batch-size", "2")
    assert code == 0, err
    alone, on_ray = json.loads(alone), json.loads(on_ray)
    assert [r["image"] for r in on_ray] == [r["image"] for r in alone] == sorted(str(p) for p in photos.iterdir())
    for ours, theirs in zip(on_ray, alone):
        assert [p["label"] for p in ours["predictions"]] == [p["label"] for p in theirs["predictions"]]
        np.testing.assert_allclose([p["probability"] for p in ours["predictions"]],
                                   [p["probability"] for p in theirs["predictions"]], rtol=0, atol=2e-6)


def test_cli_names_the_images_it_cannot_read_and_prints_the_rest(cluster, capsys, with_broken):
    pattern = str(with_broken / "*")
    code, out, err = kuiper(capsys, "classify", pattern, "--ray", "-k", "1")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == \
        [str(with_broken / name) for name in sorted(set(os.listdir(with_broken)) - BROKEN)]
    warnings = [line for line in err.splitlines() if line.startswith("kuiper classify: warning: ")]
    assert sorted(w.split(": ")[2] for w in warnings) == sorted(str(with_broken / name) for name in BROKEN)


def test_cli_writes_parquet(cluster, capsys, with_broken, single_machine, tmp_path):
    output = tmp_path / "results.parquet"
    code, out, err = kuiper(capsys, "classify", str(with_broken), "--ray", "--output", str(output))
    assert code == 0 and out == f"wrote 8 rows to {output}\n"
    assert "warning: 3 of 8 images could not be read; the error column says why" in err
    table = pq.read_table(output)
    assert table.schema.names == ["path", "labels", "indices", "probabilities", "error"]
    assert [table.schema.field(name).type.value_type for name in ("labels", "indices", "probabilities")] == \
        [pa.string(), pa.int64(), pa.float32()]
    rows = {Path(row["path"]).name: row for row in table.to_pylist()}
    assert {name for name, row in rows.items() if row["error"]} == BROKEN
    for name, expected in single_machine.items():
        assert_same_predictions(rows[name], expected)


@pytest.fixture(scope="module")
def demo_rows(tmp_path_factory) -> tuple[Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("rows")
    rows = np.random.default_rng(2).standard_normal((7, 3, 64, 64)).astype(np.float32)
    pq.write_table(pa.table({"id": np.arange(7) * 10, "pnnx_input_0": [row.tolist() for row in rows]}),
                   folder / "lists.parquet")
    np.save(folder / "rows.npy", rows)
    return folder, rows


def read_back(path: Path, key: str) -> dict[str, np.ndarray]:
    """A parquet file's columns as arrays (Ray's tensors with their shapes), rows sorted by ``key``."""
    table = pq.read_table(path)
    columns = {name: table.column(name).combine_chunks().to_numpy(zero_copy_only=False)
               for name in table.column_names}
    order = np.argsort(columns[key])
    return {name: values[order] for name, values in columns.items()}


def test_cli_run_on_parquet_lists_keeps_the_ids(cluster, capsys, demo_rows, tmp_path):
    folder, rows = demo_rows
    output = tmp_path / "out.parquet"
    code, out, err = kuiper(capsys, "run", str(DEMO), "--ray", "--input", str(folder / "lists.parquet"),
                            "--output", str(output), "--actors", "2", "--batch-size", "3")
    assert code == 0 and out == f"wrote 7 rows to {output}\n", err
    graph = kuiperinfer.load(DEMO)
    result = read_back(output, "id")
    assert list(result) == ["id", *graph.output_names]
    np.testing.assert_array_equal(result["id"], np.arange(7) * 10)
    np.testing.assert_allclose(result[graph.output_names[0]], graph.run(rows)[0], rtol=1e-5, atol=1e-6)


def test_cli_run_on_npy_writes_json_lines(cluster, capsys, demo_rows, tmp_path):
    folder, rows = demo_rows
    output = tmp_path / "out.jsonl"
    code, out, err = kuiper(capsys, "run", str(DEMO), "--ray", "--input", str(folder / "rows.npy"),
                            "--output", str(output))
    assert code == 0 and out == f"wrote 7 rows to {output}\n", err
    values = np.array(sorted(json.loads(line)[kuiperinfer.load(DEMO).output_names[0]]
                             for line in output.read_text().splitlines()))
    expected = np.array(sorted(kuiperinfer.load(DEMO).run(rows)[0].tolist()))
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)


def test_cli_run_on_ray_tensors_with_two_inputs(cluster, capsys, tmp_path):
    model = write_model(tmp_path, TWO_INPUTS, {})
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    b = np.ones((4, 3), np.float32)
    (tmp_path / "rows").mkdir()
    for part in (0, 2):   # a folder of two files, as Ray Data writes a dataset
        pq.write_table(pa.table({"key": np.arange(part, part + 2), "a": ArrowTensorArray.from_numpy(a[part:part + 2]),
                                 "b": ArrowTensorArray.from_numpy(b[part:part + 2])}),
                       tmp_path / "rows" / f"part-{part}.parquet")
    output = tmp_path / "out.parquet"
    code, out, err = kuiper(capsys, "run", str(model), "--ray", "--input", str(tmp_path / "rows"),
                            "--output", str(output))
    assert code == 0 and out == f"wrote 4 rows to {output}\n", err
    result = read_back(output, "key")
    [name] = kuiperinfer.load(model).output_names
    np.testing.assert_array_equal(result[name], a + 2 * b)


@pytest.mark.parametrize("argv, message", [
    (["run", str(DEMO), "--ray", "--input", "{rows}", "--output", "{tmp}/o.parquet", "--actors", "3"],
     "--actors 3: 3 actors need a CPU each, and the Ray cluster has 2"),
    (["run", str(DEMO), "--ray", "--input", "{rows}", "--output", "{tmp}/o.csv"],
     "write .parquet or .jsonl (the suffix says which)"),
    (["run", str(DEMO), "--ray", "--input", "{rows}"], "--ray writes the outputs to --output"),
    (["run", str(DEMO), "--ray", "--input", "{tmp}/absent.parquet", "--output", "{tmp}/o.parquet"],
     "absent.parquet: no such file or directory"),
    (["classify", "--actors", "2"], "--actors only with --ray"),
    (["classify", "--address", "auto", "--output", "x.parquet"], "--address, --output only with --ray"),
    (["classify", "{tmp}/nothing-*.jpg", "--ray"], "no files match"),
    # fails in an actor, whose CPUs Ray frees only a while later: the last to run on the cluster
    (["run", str(DEMO), "--ray", "--input", "{small}", "--output", "{tmp}/o.parquet"],
     "input 'pnnx_input_0' has shape (2, 3, 8, 8), the model expects (1,3,64,64)"),
])
def test_cli_errors_are_one_line_and_exit_2(cluster, capsys, demo_rows, tmp_path, argv, message):
    folder, _ = demo_rows
    pq.write_table(pa.table({"pnnx_input_0": [np.zeros((3, 8, 8)).tolist()] * 2}), tmp_path / "small.parquet")
    files = {"rows": folder / "lists.parquet", "small": tmp_path / "small.parquet", "tmp": tmp_path}
    code, out, err = kuiper(capsys, *[arg.format(**files) for arg in argv])
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"kuiper {argv[0]}: error: ") and message in last
    assert not list(tmp_path.glob("o.*")) and not list(tmp_path.glob(".o.*"))
