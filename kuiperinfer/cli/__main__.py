"""``python -m kuiperinfer.cli ...``: the ``kuiper`` command without its console script."""

import sys

from kuiperinfer.cli import main

sys.exit(main())
