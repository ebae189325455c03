"""``python -m exporter`` runs ``gpu-exporter``."""

import sys

from exporter.cli import main

sys.exit(main())
