#!/usr/bin/env python3
"""A recording proxy: forwards each POST to UPSTREAM and writes the request body and the
reply's bytes to OUT/NNN.request.json and OUT/NNN.sse, as the client received them.

    python3 tests/data/record.py UPSTREAM OUT     # e.g. http://127.0.0.1:8095 /tmp/rec

It listens on a free loopback port and prints its URL; point a provider at URL/v1 and run it;
stop the proxy with Ctrl-C. Used to
record tests/data/llama-server/*.sse (standard library only).
"""
import http.client
import http.server
import itertools
import os
import sys
import urllib.parse

UPSTREAM, OUT = urllib.parse.urlsplit(sys.argv[1]), sys.argv[2]
os.makedirs(OUT, exist_ok=True)
COUNTER = itertools.count(1)


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = next(COUNTER)
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with open(f"{OUT}/{n:03}.request.json", "wb") as f:
            f.write(body)
        up = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        up.request("POST", self.path, body, headers)
        reply = up.getresponse()
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        with open(f"{OUT}/{n:03}.sse", "wb") as f:
            while True:
                chunk = reply.read1(65536)
                if not chunk:
                    break
                f.write(chunk)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        up.close()


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
