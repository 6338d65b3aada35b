"""`kuiper serve`'s resident memory stays flat under sustained load (benchmarks/serve_memory.py
measures it over 10,000 requests of the bundled model; this is its smaller run in CI).

Every kind of request (JSON, binary, gRPC, and ones that do not fit the model) goes to the demo
model from four clients; once the first third has warmed the allocators and caches up, the
server's resident set may not grow by more than a few MiB.
"""

from __future__ import annotations

from cli_runner import DEMO

from benchmarks.serve_load import running_server
from benchmarks.serve_memory import main, measure, report

MIB = 1024 * 1024


def test_resident_memory_stays_flat_under_sustained_load():
    with running_server([f"demo={DEMO}"]) as server:
        run = measure(server, "demo", requests=3000, clients=4, warmup=1000)
    assert run.requests == 3000 and run.unexpected == 0, report(run)
    assert run.kinds == {"http-json": 750, "http-binary": 750, "grpc": 750, "bad": 750}
    assert len(run.after_warmup()) >= 5, report(run)
    assert run.growth < 4 * MIB, report(run)
    assert run.slope * 1000 < 1 * MIB, report(run)   # under 1 MiB per 1,000 requests


def test_the_benchmark_prints_its_samples_and_verdict(capsys):
    assert main(["--model", str(DEMO), "--requests", "200", "--clients", "2"]) == 0
    out = capsys.readouterr().out
    assert "| requests answered | RSS MiB |" in out
    assert "200 requests (50 http-json, 50 http-binary, 50 grpc, 50 bad; 0 unexpected answers); " \
           "after the first 66: the peak RSS grew" in out
