"""Code that runs inside the worker processes the launcher starts (imports torch; never imported by the
launcher process itself)."""
