"""`python -m hearth_engine`: serve the pipe protocol on stdin/stdout."""

import sys

from .server import main

sys.exit(main())
