"""An OTLP/HTTP trace receiver: POST /v1/traces, protobuf (or JSON) as the OTLP spec says.

The request is decoded by the OpenTelemetry project's own protobuf classes
(`opentelemetry-proto`, with Google's `protobuf` runtime); each span it holds is appended to
OUT as one JSON line: ids in hex, attributes as plain values, the resource's service name.

    python receiver.py PORT OUT
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

MAX_BODY = 16 << 20


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def spans_of(request):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "service": resource.get("service.name"),
                    "scope": ss.scope.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": Span.SpanKind.Name(s.kind),
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": attributes(s.attributes),
                    "status": {
                        "code": Status.StatusCode.Name(s.status.code),
                        "message": s.status.message,
                    },
                    "events": [
                        {"name": e.name, "attributes": attributes(e.attributes)}
                        for e in s.events
                    ],
                }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        length = int(self.headers.get("content-length", "0"))
        if length > MAX_BODY:
            self.send_error(413)
            return
        body = self.rfile.read(length)
        request = ExportTraceServiceRequest()
        json_body = self.headers.get("content-type", "").startswith("application/json")
        try:
            if json_body:
                json_format.Parse(body, request)
            else:
                request.ParseFromString(body)
        except Exception as e:  # a malformed export is the exporter's bug: say so
            self.send_error(400, str(e))
            return
        with open(self.server.out, "a", encoding="utf-8") as f:
            for span in spans_of(request):
                f.write(json.dumps(span) + "\n")
        reply = ExportTraceServiceResponse()
        data = json_format.MessageToJson(reply).encode() if json_body else reply.SerializeToString()
        self.send_response(200)
        self.send_header(
            "content-type", "application/json" if json_body else "application/x-protobuf"
        )
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.out = out
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
