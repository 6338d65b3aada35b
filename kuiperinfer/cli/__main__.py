"""python -m kuiperinfer.cli: the kuiper command."""

import sys

from kuiperinfer.cli import main

sys.exit(main())
