"""Wires the exporter together from a configuration: the production object graph, in one place."""

from __future__ import annotations

import gc
import logging

from common.version import VERSION
from exporter.cgroups import PodUidResolver
from exporter.config import ExporterConfig
from exporter.counters_file import load_collectors
from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.http import MetricsServer
from exporter.loop import CollectionLoop
from exporter.naming import Naming
from exporter.nvml import Nvml
from exporter.podresources import PodResourcesClient
from exporter.pods import PodViewRefresher
from exporter.snapshot import SnapshotBuilder
from exporter.webconfig import WebConfig, load_web_config
from exporter.xid import XidCounter, XidWatcher

log = logging.getLogger(__name__)


def freeze_startup_objects() -> None:
    """Take everything allocated at start-up (modules, classes, the object graph) out of the cyclic GC.

    Those objects live as long as the process. Left in, every full collection walks them all (~36,000
    objects, several milliseconds), and the pause lands on whichever scrape happens to trigger it.
    """
    gc.collect()
    gc.freeze()


class Exporter:
    """The running exporter: collection loop, kubelet refresher, XID thread and HTTP server."""

    def __init__(self, config: ExporterConfig, nvml: Nvml | None = None) -> None:
        """Raises :class:`exporter.config.ConfigError` for a collectors or web-config file that cannot
        be used, and OSError when the port cannot be bound."""
        served = None
        if config.collectors is not None:
            collectors = load_collectors(config.collectors)
            served = collectors.served
            if collectors.skipped:
                log.warning(
                    "%s: not read by this exporter, skipped: %s",
                    config.collectors,
                    ", ".join(collectors.skipped),
                )
        web = WebConfig() if config.web_config is None else load_web_config(config.web_config)
        naming = Naming(config.metric_names, config.hostname_label)
        if nvml is None:
            nvml = Nvml()
        self.nvml = nvml
        self.pods = (
            None
            if config.kubelet_socket is None
            else PodViewRefresher(
                PodResourcesClient(config.kubelet_socket),
                pod_log_dir=config.pod_log_dir,
                gpu_info_dir=config.proc_root / "driver/nvidia/gpus",
                refresh_s=max(config.interval_s, 1.0),
                resource_names=config.nvidia_resource_names,
            )
        )
        xids = XidCounter()
        self.xid_watcher = XidWatcher(nvml, xids)
        self.cycle = Cycle(
            nvml,
            SnapshotBuilder(config.hostname, version=VERSION, naming=naming, pod_uid=config.pod_uid),
            pods=self.pods,
            pid_resolver=None if self.pods is None else PodUidResolver(config.proc_root),
            xid_counter=xids,
            xid_watcher=self.xid_watcher,
            interval_s=config.interval_s,
            # Only what is served is read from NVML (the counters file, else this naming's defaults).
            served=naming.default_served() if served is None else served,
        )
        self.exposition = Exposition(lambda: self.loop.latest(), naming.families(served))
        # A snapshot is encoded by the first scrape that asks for it, not after each collection: most
        # are never scraped (docs/exporter.md, "The exporter's own work").
        self.loop = CollectionLoop(self.cycle.run, interval_s=config.interval_s)
        self.server = MetricsServer(
            self.exposition,
            self.loop.liveness,
            config.listen_host,
            config.listen_port,
            readiness=self.loop.health,
            web=web,
        )
        self._config = config

    def start(self) -> None:
        freeze_startup_objects()
        if self.pods is not None:
            self.pods.start()
        self.loop.start()
        self.xid_watcher.start()
        self.server.start()
        log.info(
            "gpu-exporter %s serving on port %d (%s) every %.3gs%s",
            VERSION,
            self.server.port,
            "https" if self._config.web_config and self.server.tls else "http",
            self._config.interval_s,
            f" (simulated: {self._config.simulate})" if self._config.simulate else "",
        )

    def stop(self) -> None:
        self.server.stop()
        self.xid_watcher.stop()
        self.loop.stop()
        if self.pods is not None:
            self.pods.stop()
        self.cycle.shutdown()
