"""``python -m exporter`` runs ``gpu-exporter``."""

import sys

from cli.exporter import main

sys.exit(main())
