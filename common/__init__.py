"""The shared vocabulary of the three tools: findings, times and durations, errors, logs, policy files.

The lowest layer: it imports none of the other packages (exporter, analyzer, reaper, simulation, cli).
"""
