"""``python -m coffer_mcp`` runs the ``coffer`` command."""

import sys

from coffer_mcp.cli import main

sys.exit(main())
