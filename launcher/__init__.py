"""trainplan's launcher: `python -m launcher run plan.json` wraps torchrun, deepspeed and Slurm.

It reads plan.json (launcher/spec.py), imports nothing from app/ and no torch in its own process; torch
runs only in the training processes it starts (and in launcher/workers/, which those processes execute).
"""
