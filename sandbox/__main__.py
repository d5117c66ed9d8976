"""``python -m sandbox``: the command line, which lives in `sandbox._cli`."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
