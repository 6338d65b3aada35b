"""Prometheus metrics, on a port of their own as Triton serves them (``--metrics-port``, 8002).

Each model has Triton's series where they mean the same, labelled ``model`` and ``version``:

    nv_inference_request_success            requests answered
    nv_inference_request_failure            requests failed, by ``reason``: REJECTED (queue full,
                                            model unavailable), BACKEND (the model failed),
                                            OTHER (a request that does not fit the model)
    nv_inference_count                      samples run for answered requests
    nv_inference_exec_count                 runs of the model (joined requests share one)
    nv_inference_request_duration_us        answered requests' time from arrival to answer
    nv_inference_queue_duration_us          their time waiting for a run
    nv_inference_compute_infer_duration_us  their runs' time (a joined run counts per request)
    nv_inference_pending_request_count      requests queued now (a gauge)

and one of ours, the batches the batcher formed:

    kuiper_inference_batch_size             a histogram of each run's samples

Triton's counters keep Triton's names exactly, without the ``_total`` prometheus-client gives
a counter: they are exposed untyped, so that queries and dashboards written for Triton work
as they are (``rate()`` and ``increase()`` treat them as counters). The process's own series
(``process_resident_memory_bytes``, CPU seconds, open files) come with them.

The numbers are read from the models' :class:`~kuiperinfer.serve.stats.ModelStats` when
Prometheus scrapes, so they are the ones the statistics endpoints give.
"""

from __future__ import annotations

from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from kuiperinfer.serve.server import VERSION, ModelServer
from kuiperinfer.serve.stats import FAILURE_REASONS

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Upper bounds of the batch size histogram's buckets (and +Inf)."""

_COUNTERS = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (samples of successful requests)",
    "nv_inference_exec_count": "Number of model executions performed",
    "nv_inference_request_duration_us": "Cumulative inference request duration in microseconds",
    "nv_inference_queue_duration_us": "Cumulative inference queuing duration in microseconds",
    "nv_inference_compute_infer_duration_us": "Cumulative compute inference duration in microseconds",
}


class ServerCollector(Collector):
    """The metrics of a :class:`ModelServer`'s models, read when collected."""

    def __init__(self, server: ModelServer):
        self.server = server

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "version"]
        counters = {name: UnknownMetricFamily(name, text, labels=labels) for name, text in _COUNTERS.items()}
        failure = UnknownMetricFamily("nv_inference_request_failure",
                                      "Number of failed inference requests, all batch sizes",
                                      labels=[*labels, "reason"])
        pending = GaugeMetricFamily("nv_inference_pending_request_count",
                                    "Instantaneous number of pending requests awaiting execution per-model",
                                    labels=labels)
        batches = HistogramMetricFamily("kuiper_inference_batch_size",
                                        "Samples in each run of the model, as the batcher joined requests",
                                        labels=labels)
        for name, (stats, queued) in self.server.stats().items():
            numbers = stats.snapshot()
            model = [name, VERSION]
            values = {"nv_inference_request_success": numbers.success.count,
                      "nv_inference_count": numbers.inference_count,
                      "nv_inference_exec_count": numbers.execution_count,
                      "nv_inference_request_duration_us": numbers.success.ns // 1000,
                      "nv_inference_queue_duration_us": numbers.queue.ns // 1000,
                      "nv_inference_compute_infer_duration_us": numbers.compute.ns // 1000}
            for metric, value in values.items():
                counters[metric].add_metric(model, value)
            for reason in FAILURE_REASONS:
                failure.add_metric([*model, reason], numbers.failure[reason].count)
            pending.add_metric(model, queued)
            runs = {size: d.count for size, d in numbers.batches.items()}
            buckets = [(str(bound), sum(n for size, n in runs.items() if size <= bound)) for bound in BATCH_BUCKETS]
            buckets.append(("+Inf", sum(runs.values())))
            batches.add_metric(model, buckets, sum(size * n for size, n in runs.items()))
        yield from counters.values()
        yield failure
        yield pending
        yield batches


def registry(server: ModelServer) -> CollectorRegistry:
    """A registry of the server's metrics and the process's."""
    collected = CollectorRegistry()
    collected.register(ServerCollector(server))
    ProcessCollector(registry=collected)
    return collected


def serve_metrics(server: ModelServer, host: str, port: int) -> WSGIServer:
    """Serve the metrics at ``http://host:port/metrics`` from a thread of their own; the
    HTTP server (``server_port`` is its port; ``shutdown()`` stops it). Raises OSError when
    the port cannot be had."""
    http, _ = start_http_server(port, host, registry(server))
    return http
