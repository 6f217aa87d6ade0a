import os

# Deterministic hypothesis runs and CPU-only DeepSpeed everywhere in the suite.
os.environ.setdefault("DS_ACCELERATOR", "cpu")
