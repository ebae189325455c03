"""The benchmark's client floor: ours' requests replayed in ours' rounds, each answer decoded.

The floor is only a floor if it keeps ours' order where ours had to wait (a request asked for
after another was answered goes out after it) and nothing more (requests ours had out together go
out together); and it only counts reading the answers if it reads every kind ours gets.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.analyzer_bench import Call, floor

VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"UUID": "GPU-1"}, "value": [1.0, "12.5"]}]},
}
LABELS = {"status": "success", "data": ["UUID", "pod"]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.arrived: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.b_arrived = threading.Event()
        self.a_saw_b = False


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        name = self.path.rsplit("=", 1)[-1]
        server = self.server
        with server.lock:
            server.arrived[name] = time.perf_counter()
        if name == "b":
            server.b_arrived.set()
        if name == "a":
            # Answered only once b is out: b was asked for before a was answered, so ours had both
            # out at once and the floor must too.
            server.a_saw_b = server.b_arrived.wait(timeout=10)
        body = json.dumps(LABELS if name == "d" else VECTOR).encode()
        zipped = gzip.compress(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(zipped)))
        self.end_headers()
        self.wfile.write(zipped)
        with server.lock:
            server.finished[name] = time.perf_counter()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    yield s
    s.shutdown()
    s.server_close()


def test_floor_keeps_ours_rounds_and_decodes_every_answer(server: _Server) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/query"

    def call(name: str, asked: float, answered: float) -> Call:
        return Call("GET", url, {"query": name}, asked, answered)

    # a and b out together; c asked for once a had answered (b still out); d once all had.
    calls = [call("d", 3.5, 4.0), call("c", 1.5, 3.0), call("b", 0.5, 2.0), call("a", 0.0, 1.0)]
    elapsed = floor(calls, concurrency=4)

    assert set(server.finished) == {"a", "b", "c", "d"}
    assert server.a_saw_b, "b waited for a although ours had both out at once"
    assert server.arrived["c"] >= server.finished["a"]
    assert server.arrived["d"] >= max(server.finished[n] for n in "abc")
    assert elapsed > 0
