"""`python -m gateway` runs the `ledgerwire` command."""

import sys

from gateway.cli import main

sys.exit(main())
