"""The project's version: one constant, the only place it is written.

``pyproject.toml`` reads it for the package's metadata (``[tool.setuptools.dynamic]``), so the
installed distribution and the commands agree. The commands' ``--version`` and the exporter's
``build_info`` read it here rather than through ``importlib.metadata``, which scans every installed
distribution: about as long as the rest of argument parsing (docs/architecture.md, "Start-up time").
"""

VERSION = "0.1.0"
