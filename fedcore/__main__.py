"""``python -m fedcore``: the same command line as ``fedcore``."""

import sys

from fedcore.cli import main

sys.exit(main())
