"""``python -m moe_select`` runs the ``moe-select`` command line."""
import sys

from .cli import main

sys.exit(main())
