"""``python -m analyzer`` runs ``gpu-analyzer``."""

import sys

from cli.analyzer import main

sys.exit(main())
