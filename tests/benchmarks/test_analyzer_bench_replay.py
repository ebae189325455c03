"""The benchmark's client floor: ours' requests replayed in ours' rounds, each answer decoded.

The floor keeps ours' order where ours waited (a request asked for after another was answered
goes out after it) and no more (requests ours had out at once go out at once, even when one was
asked for after another had answered); and it counts reading the answers only if it reads them.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
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
        self.c_arrived = threading.Event()
        self.a_saw_b = self.b_saw_c = False


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        name = self.path.rsplit("=", 1)[-1]
        server = self.server
        with server.lock:
            server.arrived[name] = time.perf_counter()
        {"b": server.b_arrived, "c": server.c_arrived}.get(name, threading.Event()).set()
        if name == "a":
            # Answered only once b is out: b was asked for before a was answered, so ours had both
            # out at once and the floor must too.
            server.a_saw_b = server.b_arrived.wait(timeout=10)
        if name == "b":
            # Answered only once c is out: c was asked for once a had answered, b still out.
            server.b_saw_c = server.c_arrived.wait(timeout=10)
        body = b"not json" if name == "garbled" else json.dumps(LABELS if name == "d" else VECTOR).encode()
        zipped = gzip.compress(body)
        with server.lock:  # before the answer leaves: the client may act on it at once
            server.finished[name] = time.perf_counter()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(zipped)))
        self.end_headers()
        self.wfile.write(zipped)

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
    assert server.b_saw_c, "c waited for b although ours asked for c while b was out"
    assert server.arrived["c"] >= server.finished["a"]
    assert server.arrived["d"] >= max(server.finished[n] for n in "abc")
    assert elapsed > 0


def test_floor_reads_every_answer(server: _Server) -> None:
    """An answer that is not JSON fails the floor: each one is decoded, not only received."""
    url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/query"
    with pytest.raises(msgspec.DecodeError):
        floor([Call("GET", url, {"query": "garbled"}, 0.0, 1.0)], concurrency=2)
