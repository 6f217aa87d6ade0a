"""`python -m launcher`: see launcher/cli.py."""

import sys

from launcher.cli import main

sys.exit(main())
