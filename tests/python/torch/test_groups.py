"""Subgroups (new_group): each gets its own gocl communicator, rendezvoused
through torch's store under a key naming the group's global ranks; groups
that overlap, groups a rank is not in, and ops on several groups in turn."""

from __future__ import annotations

import datetime
import os
import time

import pytest
from gocl.tools.launcher import free_port
from torchdist_util import Failures, R, dist, group, torch  # noqa: I001


@pytest.mark.ranks(4)
def test_subgroups():
    with group() as (rank, world):
        f = Failures(rank)
        evens = dist.new_group([0, 2])
        odds = dist.new_group([1, 3])
        first3 = dist.new_group([0, 1, 2])
        pair = dist.new_group([3, 0])  # order given by the user; group ranks follow global order
        mine = evens if rank % 2 == 0 else odds
        members = [0, 2] if rank % 2 == 0 else [1, 3]

        x = torch.full((5,), float(rank))
        dist.all_reduce(x, group=mine)
        f.check(bool((x == sum(members)).all()), f"all_reduce in {members}: {x}")

        if rank in (0, 1, 2):
            y = torch.full((3,), float(rank + 1))
            dist.all_reduce(y, op=R.PRODUCT, group=first3)
            f.check(bool((y == 6).all()), f"all_reduce PRODUCT in [0,1,2]: {y}")
            outs = [torch.empty(2) for _ in range(3)]
            dist.all_gather(outs, torch.full((2,), float(rank)), group=first3)
            f.check([int(o[0]) for o in outs] == [0, 1, 2], f"all_gather in [0,1,2]: {outs}")
            # broadcast from global rank 2 (group rank 2)
            z = torch.full((4,), float(rank))
            dist.broadcast(z, src=2, group=first3)
            f.check(bool((z == 2).all()), f"broadcast from global 2 in [0,1,2]: {z}")
        else:
            f.check(first3 == dist.GroupMember.NON_GROUP_MEMBER, "rank 3 is not in [0,1,2]")

        if rank in (0, 3):
            t = torch.full((2,), float(rank))
            peer = 3 if rank == 0 else 0
            if rank == 0:
                dist.send(t, peer, group=pair)
            else:
                dist.recv(t, peer, group=pair)
            f.check(bool((t == 0).all()), f"send/recv in [0,3]: {t}")
            f.check(dist.get_process_group_ranks(pair) == [0, 3], f"ranks {dist.get_process_group_ranks(pair)}")

        # the world group still works, interleaved with subgroup ops (async)
        w1 = dist.all_reduce(a := torch.ones(3), async_op=True)
        w2 = dist.all_reduce(b := torch.ones(3), group=mine, async_op=True)
        w1.wait()
        w2.wait()
        f.check(bool((a == 4).all()) and bool((b == 2).all()), f"world {a} and subgroup {b} async")

        # object collectives and barrier on a subgroup
        objs = [None, None]
        dist.all_gather_object(objs, {"g": rank}, group=mine)
        f.check(objs == [{"g": m} for m in members], f"all_gather_object in subgroup {objs}")
        dist.barrier(group=mine)

        # a subgroup of everyone, and split_group-free new_subgroups
        sub, _ = dist.new_subgroups(group_size=2)
        s = torch.ones(1)
        dist.all_reduce(s, group=sub)
        f.check(s.item() == 2, f"new_subgroups all_reduce {s}")
        f.done()


@pytest.mark.ranks(2)
def test_reinit_after_destroy():
    """destroy_process_group then init again in the same processes: new
    communicators, fresh unique ids; also with one store kept across the
    incarnations (as torchelastic's agent store is), where the group's store
    keys repeat."""
    # Each incarnation gets a port of its own, chosen by rank 0 while the
    # previous group is up and broadcast through it: rank 0's store of the
    # last round may still accept a connection while it shuts down (torch's
    # env:// race, not gocl's), and fixed offsets from MASTER_PORT can collide
    # with a port another process holds.
    store = None
    for round_ in range(2):
        with group() as (rank, world):
            x = torch.full((3,), float(rank + round_))
            dist.all_reduce(x)
            assert bool((x == 1 + 2 * round_).all()), x
            if rank == 0 and round_ == 1:  # the store kept across the next incarnations
                store = dist.TCPStore(os.environ["MASTER_ADDR"], 0, world, True, wait_for_workers=False,
                                      timeout=datetime.timedelta(seconds=60))
            ports = [free_port() if round_ == 0 else (store.port if store else 0)] if rank == 0 else [0]
            dist.broadcast_object_list(ports, src=0)
            if round_ == 0:
                os.environ["MASTER_PORT"] = str(ports[0])
            else:
                store_port = ports[0]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if store is None:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], store_port, world, False,
                              timeout=datetime.timedelta(seconds=60))
    for round_ in range(3):
        dist.init_process_group("gocl", store=store, rank=rank, world_size=world)
        x = torch.full((2,), float(rank + round_))
        dist.all_reduce(x)
        assert bool((x == 1 + 2 * round_).all()), (round_, x)
        dist.barrier()
        dist.destroy_process_group()
    store.add("done", 1)
    while rank == 0 and store.add("done", 0) < world:  # rank 0 hosts the store: it leaves last
        time.sleep(0.01)
