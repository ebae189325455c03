"""``gpu-exporter``: the command-line entry point."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from exporter.app import Exporter
from exporter.config import ConfigError, from_args
from exporter.logs import configure

log = logging.getLogger("exporter")


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT. Exit status: 0 stopped cleanly, 1 could not start, 2 bad usage."""
    try:
        config = from_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        print(f"gpu-exporter: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse has printed the usage error (or --help)
        return exc.code if isinstance(exc.code, int) else 2
    configure(config.log_format)

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    try:
        exporter = Exporter(config)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.listen_host, config.listen_port, exc)
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    exporter.start()
    stop.wait()
    exporter.stop()
    return 0
