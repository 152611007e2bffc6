"""`python -m gateway` runs the `ledgerwire` command."""

import sys

from gateway.cli.main import main

sys.exit(main())
