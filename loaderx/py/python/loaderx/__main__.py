"""``python -m loaderx``: the operators' command (see :mod:`loaderx.cli`)."""

import sys

from .cli import main

sys.exit(main())
