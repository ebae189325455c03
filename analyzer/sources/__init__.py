"""Where the analyzer reads metrics from: the Prometheus query API, the PromQL it sends, the DCGM schema,
and the per-device aggregates every source hands to detection.
"""
