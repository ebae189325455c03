"""``python -m reaper`` runs ``gpu-reaper``."""

import sys

from cli.reaper import main

sys.exit(main())
