"""Everything that stands in for the real world, above the tools it drives.

The fleet simulator (``fleet``), the in-memory metrics source (``metrics_source``) and cluster
(``cluster``), the demo (``demo``), and the fake NVML binding with its GPU profiles and scenarios
(``fake_nvml``, ``gpu_profiles``, ``gpu_scenarios``).
"""
