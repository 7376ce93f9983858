"""A few DDP training steps with NCCL, and an all-reduce whose result is checked.

torchrun starts one copy per GPU (the PyTorchJob in pytorchjob-ddp.yaml, or the Slurm script
slurm/torchrun.sbatch). It exits non-zero if a collective returns a wrong result, so a job that
runs to the end has moved correct data through whichever NCCL net plugin the environment chose.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)

    # The check: every rank contributes rank + 1, so the sum is world * (world + 1) / 2.
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    if not torch.all(x == want):
        print(f"rank {rank}: all_reduce gave {x[0].item()}, want {want}", file=sys.stderr)
        return 1

    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps = int(os.environ.get("DDP_STEPS", "20"))
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(steps):
        opt.zero_grad()
        loss = ddp(torch.randn(64, 4096, device=device)).square().mean()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    # The replicas must agree after the steps: DDP all-reduced the gradients.
    w = model[0].weight.detach().clone()
    w_max = w.clone()
    dist.all_reduce(w_max, op=dist.ReduceOp.MAX)
    if not torch.equal(w, w_max):
        print(f"rank {rank}: replicas diverged after {steps} steps", file=sys.stderr)
        return 1
    if rank == 0:
        ms = (time.time() - t0) * 1000 / steps
        print(f"ddp_step: {world} ranks, {steps} steps, {ms:.1f} ms/step, results checked")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
