"""A stand-in for Megatron-LM's pretrain_gpt.py under torchrun (standard library only): the last rank prints
Megatron's training log line every --log-interval iterations, the others print nothing, as print_rank_last does;
with --hang-at N the last rank stops making progress at iteration N (the others keep waiting, as in a collective);
with --exit-interval N every rank exits 0 after iteration N, as Megatron's --exit-interval does.

    fake_megatron.py --train-iters 100 --log-interval 2 --step-s 0.05 [--hang-at 8] [--exit-interval 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--train-iters", type=int, default=100)
    p.add_argument("--log-interval", type=int, default=100)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--hang-at", type=int, default=0)
    p.add_argument("--exit-interval", type=int, default=0)
    args, _ = p.parse_known_args()
    last = int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1
    for iteration in range(1, args.train_iters + 1):
        if iteration == args.hang_at:
            time.sleep(3600)
        time.sleep(args.step_s)
        if last and iteration % args.log_interval == 0:
            print(
                f" [2026-01-01 00:00:00] iteration {iteration:8d}/{args.train_iters:8d} | consumed samples: "
                f"{iteration * 8:12d} | elapsed time per iteration (ms): {args.step_s * 1000:.1f} | "
                f"learning rate: 3.000E-04 | global batch size:     8 | lm loss: 1.0E+01 |",
                flush=True,
            )
        if args.exit_interval and iteration % args.exit_interval == 0:
            print(f" [2026-01-01 00:00:00] exiting program at iteration {iteration}", flush=True)
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
