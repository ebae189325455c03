"""The fake-GPU scenarios' names (simulation.gpu_scenarios builds them): apart, so that the
exporter's command line offers them without loading the fake NVML and pynvml."""

SCENARIOS = ("idle", "busy", "sawtooth", "lost-gpu", "mig", "shared", "throttled")
