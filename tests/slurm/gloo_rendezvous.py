"""A stand-in for a multi-node engine where no GPU engine runs: one process per Slurm node joins a
CPU torch.distributed (gloo) group from what rig's launcher handed it (MASTER_ADDR/MASTER_PORT,
RANK, WORLD_SIZE, and the head's address in its argv), all-reduces its rank + 1 and prints one
JSON line of what it saw."""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist_init_addr = sys.argv[sys.argv.index("--dist-init-addr") + 1]
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "node": os.environ["SLURMD_NODENAME"],
                      "node_rank": int(os.environ["RIG_NODE_RANK"]), "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                      "dist_init_addr": dist_init_addr, "sum": value.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
