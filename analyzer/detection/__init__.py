"""From aggregates to verdicts: workload resolution, per-workload views and the detectors. Pure."""
