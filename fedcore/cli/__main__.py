"""``python -m fedcore.cli``: the same command line as ``fedcore``."""

import sys

from fedcore.cli import main

sys.exit(main())
