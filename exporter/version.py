"""The exporter's version, as the installed package states it (build_info, start-up log).

Its own module, not the package's ``__init__``: reading package metadata costs every importer of
any exporter module (the command line's --help among them) tens of milliseconds.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kube-gpu-reaper")
except PackageNotFoundError:  # running from a source checkout
    __version__ = "0.0.0+source"
