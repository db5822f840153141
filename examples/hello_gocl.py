"""The smallest torch.distributed program over gocl.

    torchrun --nproc-per-node 4 examples/hello_gocl.py
    gocl run -n 4 python examples/hello_gocl.py          # same thing

With gocl installed, `import torch` registers the "gocl" backend (torch's
backend autoload), so the program is the one you would write for gloo or
nccl, with the backend's name changed.
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gocl")  # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from torchrun)
    rank, world = dist.get_rank(), dist.get_world_size()

    x = torch.full((4,), float(rank))
    dist.all_reduce(x)  # sum over ranks: 0 + 1 + ... + (world - 1)
    assert torch.all(x == world * (world - 1) / 2), x

    gathered = [None] * world
    dist.all_gather_object(gathered, f"hello from rank {rank}")

    if rank == 0:
        print(f"gocl: {world} ranks, all_reduce gave {x.tolist()}")
        for line in gathered:
            print(" ", line)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
