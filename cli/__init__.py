"""The three command lines, above every other package: ``gpu-exporter``, ``gpu-analyzer``, ``gpu-reaper``.

They wire the tools together (and the simulation in for ``--simulate`` and ``demo``); no tool imports them.
"""
