"""The compiled kernels' set-up: compiled once per machine into the cache, taken from it by
later processes, said once; an unwritable cache and a missing Numba still run."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from kuiperinfer.kernels import jit

DEMO_CNN = Path(__file__).resolve().parent.parent / "data" / "demo_cnn" / "demo_cnn.pnnx.param"
NOTICE = "kuiperinfer: compiling kernels"

LOAD_AND_REPORT = f"""
import json, numpy as np, kuiperinfer
from kuiperinfer.kernels import jit
graph = kuiperinfer.load({str(DEMO_CNN)!r})
out = graph(np.ones((2, 3, 64, 64), np.float32))
print(json.dumps({{"available": jit.AVAILABLE, "sum": float(out.sum()),
                   "kernels": [[s.name, s.cache_hits, s.compiled, s.seconds] for s in jit.kernel_stats()]}}))
"""


def run_python(code: str, cache_dir: str, *prelude: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUIPERINFER_CACHE_DIR": cache_dir}
    return subprocess.run([sys.executable, "-c", "\n".join((*prelude, code))], env=env, capture_output=True,
                          text=True, timeout=300, check=True)


def report(process: subprocess.CompletedProcess) -> dict:
    import json
    return json.loads(process.stdout.strip().splitlines()[-1])


def test_a_second_process_takes_every_kernel_from_the_cache(tmp_path):
    first = run_python(LOAD_AND_REPORT, str(tmp_path))
    second = run_python(LOAD_AND_REPORT, str(tmp_path))
    cold, warm = report(first), report(second)
    assert cold["kernels"] and all(compiled >= 1 and seconds > 0 for _, _, compiled, seconds in cold["kernels"])
    assert first.stderr.count(NOTICE) == 1
    assert warm["kernels"] and all(hits >= 1 and compiled == 0 and seconds == 0
                                   for _, hits, compiled, seconds in warm["kernels"])
    assert NOTICE not in second.stderr
    assert warm["sum"] == cold["sum"]
    assert any(tmp_path.joinpath("numba").rglob("*.nbi"))


def test_an_unwritable_cache_still_runs_and_says_so(tmp_path):
    """A cache path that is a file cannot be written, even by root."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    process = run_python(LOAD_AND_REPORT, str(blocker))
    assert "cannot be written" in process.stderr
    assert report(process)["kernels"] and all(compiled >= 1 for _, _, compiled, _ in report(process)["kernels"])


def test_without_numba_the_reference_kernels_run_after_one_warning(tmp_path):
    with_numba = report(run_python(LOAD_AND_REPORT, str(tmp_path)))
    process = run_python(LOAD_AND_REPORT, str(tmp_path), "import sys", "sys.modules['numba'] = None")
    without = report(process)
    assert without["available"] is False and without["kernels"] == []
    assert process.stderr.count("Numba could not be imported") == 1 and "pip install numba" in process.stderr
    assert abs(without["sum"] - with_numba["sum"]) < 1e-4


def test_empty_starts_on_a_cache_line():
    for shape in [(3,), (5, 7, 9), (1, 112, 112, 16)]:
        array = jit.empty(shape)
        assert array.shape == shape and array.dtype == np.float32 and array.flags.c_contiguous
        assert array.ctypes.data % 64 == 0


def test_data_address_is_where_numpy_says_the_data_starts():
    memory = np.empty(100, np.float32)
    for view in (memory, memory[3:], memory[7:90].reshape(1, 83)):
        assert jit.data_address(view) == view.ctypes.data


def test_a_threads_scratch_is_its_own_and_kept_for_its_next_call():
    first = jit.scratch((4, 1000))
    again = jit.scratch((10, 10))
    assert again.ctypes.data == first.ctypes.data and again.shape == (10, 10)
    assert jit.scratch((3000,)).ctypes.data % 64 == 0            # larger: a new one, on a cache line
    others = []
    thread = threading.Thread(target=lambda: others.append(jit.scratch((10, 10)).ctypes.data))
    thread.start()
    thread.join()
    assert others[0] != jit.scratch((10, 10)).ctypes.data
