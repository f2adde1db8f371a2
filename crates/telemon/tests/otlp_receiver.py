#!/usr/bin/env python3
"""A tiny OTLP/HTTP metrics receiver for telemon's push tests.

Decodes every `POST /v1/metrics` with the official `opentelemetry-proto` package and prints one JSON
line per data point on stdout (flushed), then answers 200 with an empty ExportMetricsServiceResponse.
A number point without a value (as telemon sends when a series ends, with `flags` = 1) has `"value": null`.
Usage: otlp_receiver.py PORT (0 picks a free port; the first line printed is {"listening": PORT}).
"""
import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality


def attrs(kvs):
    return {kv.key: kv.value.string_value for kv in kvs}


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding", "") == "gzip":
            body = gzip.decompress(body)
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        for rm in req.resource_metrics:
            resource = attrs(rm.resource.attributes)
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    base = {"name": m.name, "unit": m.unit, "type": kind, "resource": resource}
                    if kind == "sum":
                        base["monotonic"] = m.sum.is_monotonic
                        base["temporality"] = AggregationTemporality.Name(m.sum.aggregation_temporality)
                        points = m.sum.data_points
                    elif kind == "gauge":
                        points = m.gauge.data_points
                    elif kind == "histogram":
                        base["temporality"] = AggregationTemporality.Name(m.histogram.aggregation_temporality)
                        points = m.histogram.data_points
                    else:
                        emit(dict(base, unsupported=True))
                        continue
                    for p in points:
                        line = dict(base, attrs=attrs(p.attributes), start=p.start_time_unix_nano, time=p.time_unix_nano, flags=p.flags)
                        if kind == "histogram":
                            line.update(bounds=list(p.explicit_bounds), counts=list(p.bucket_counts), sum=p.sum, count=p.count)
                        else:
                            value = p.WhichOneof("value")
                            line["value"] = None if value is None else getattr(p, value)
                        emit(line)
        reply = ExportMetricsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    emit({"listening": server.server_address[1]})
    server.serve_forever()


if __name__ == "__main__":
    main()
