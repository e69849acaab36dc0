"""A stand-in service for the supervisor tests (standard library only).

usage: service.py MODE PORT
  ok           serve GET /health -> 200; GET /exit makes the process exit 7
  grandchild   like ok, after starting a grandchild `sleep` in the same process group
  never-ready  never listen
  exit-early   print a line and exit 3 at once
"""
import http.server
import subprocess
import sys
import time

mode, port = sys.argv[1], int(sys.argv[2])
print(f"service starting: {mode} on {port}", flush=True)
if mode == "exit-early":
    print("fatal: configuration broken", flush=True)
    sys.exit(3)
if mode == "never-ready":
    while True:
        time.sleep(1)
if mode == "grandchild":
    child = subprocess.Popen(["sleep", "600"])
    print(f"grandchild {child.pid}", flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/exit":
            print("exiting on request", flush=True)
            sys.stdout.flush()
            import os
            os._exit(7)
        body = b'{"status":"healthy"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
