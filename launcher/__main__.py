"""`python -m launcher`: see launcher/cli.py. Collection waits until the agents run (launcher/startup.py)."""

from launcher import startup

startup.defer_collection()

import sys  # noqa: E402

from launcher.cli import main  # noqa: E402

sys.exit(main())
