"""One rank of a multi-process distributed test: `python -m tests.backend.distributed_worker SCENARIO RANK WORLD PORT`.

The ranks meet at the TCPStore that test_distributed.py serves on 127.0.0.1:PORT. Each scenario prints
one JSON line of results on stdout; test_distributed.py starts the ranks, bounds every wait and checks the
results against the CPU.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

STEPS = 4


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def training_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=generator), torch.randn(8, 4, generator=generator)


def train(model: torch.nn.Module, parameters, inputs: torch.Tensor, targets: torch.Tensor) -> None:
    optimizer = torch.optim.SGD(parameters, lr=0.1)
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def my_shard(tensor: torch.Tensor, rank: int, world: int, device: str) -> torch.Tensor:
    rows = tensor.shape[0] // world
    return tensor[rank * rows:(rank + 1) * rows].to(device)


def collectives(rank: int, world: int) -> dict:
    device = f"sim:{rank}"
    results: dict = {"default_backend": dist.get_default_backend_for_device("sim"),
                     "backend_name": dist.group.WORLD._get_backend(torch.device(device)).name()}
    tensor = torch.full((4,), float(rank + 1), device=device)
    address = tensor.data_ptr()
    dist.all_reduce(tensor)
    results["all_reduce"] = tensor.tolist()
    results["all_reduce_in_place"] = tensor.data_ptr() == address
    maximum = torch.tensor([float(rank)], device=device)
    dist.all_reduce(maximum, op=dist.ReduceOp.MAX)
    results["all_reduce_max"] = maximum.tolist()
    broadcast = torch.full((3,), float(rank), device=device)
    dist.broadcast(broadcast, src=1)
    results["broadcast"] = broadcast.tolist()
    gathered = [torch.empty(2, device=device) for _ in range(world)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device=device))
    results["all_gather"] = [t.tolist() for t in gathered]
    results["all_gather_devices"] = sorted({str(t.device) for t in gathered})
    into = torch.empty(2 * world, device=device)
    dist.all_gather_into_tensor(into, torch.full((2,), float(rank), device=device))
    results["all_gather_into_tensor"] = into.tolist()
    scattered = torch.empty(2, device=device)
    dist.reduce_scatter_tensor(scattered, torch.arange(2.0 * world, device=device) * (rank + 1))
    results["reduce_scatter_tensor"] = scattered.tolist()
    from_list = torch.empty(2, device=device)
    dist.reduce_scatter(from_list, [torch.full((2,), float(10 * r + rank), device=device) for r in range(world)])
    results["reduce_scatter"] = from_list.tolist()
    single = torch.empty(world, device=device)
    dist.all_to_all_single(single, torch.arange(world, device=device, dtype=torch.float32) + 10 * rank)
    results["all_to_all_single"] = single.tolist()
    outputs = [torch.empty(1, device=device) for _ in range(world)]
    dist.all_to_all(outputs, [torch.tensor([10.0 * rank + r], device=device) for r in range(world)])
    results["all_to_all"] = [t.item() for t in outputs]
    message = torch.full((3,), 7.0, device=device) if rank == 0 else torch.zeros(3, device=device)
    if rank == 0:
        dist.send(message, dst=1)
    elif rank == 1:
        dist.recv(message, src=0)
    results["send_recv"] = message.tolist()
    dist.barrier()
    work = dist.all_reduce(torch.ones(2, device=device), async_op=True)
    work.wait()
    results["future_devices"] = [str(t.device) for t in work.get_future().value()]
    return results


def ddp(rank: int, world: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    torch.sim.set_device(rank)
    device = f"sim:{rank}"
    model = small_model().to(device)
    wrapped = DistributedDataParallel(model, device_ids=[rank])
    inputs, targets = training_batch()
    train(wrapped, wrapped.parameters(), my_shard(inputs, rank, world, device), my_shard(targets, rank, world, device))
    return {"parameters": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
            "gradient_devices": sorted({str(p.grad.device) for p in model.parameters()})}


def ddp_collected_after_destroy(rank: int, world: int) -> dict:
    """DDP's reducer keeps the process group (and simccl's Gloo backend) alive until Python collects the model, after
    destroy_process_group, while holding the GIL: simccl must not wait for Gloo's workers then."""
    import gc

    # with inductor imported, a finished work's saved thread state holds Python objects
    import torch._inductor.codecache  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel

    torch.sim.set_device(rank)
    device = f"sim:{rank}"
    wrapped = DistributedDataParallel(small_model().to(device), device_ids=[rank])
    inputs, targets = training_batch()
    train(wrapped, wrapped.parameters(), my_shard(inputs, rank, world, device), my_shard(targets, rank, world, device))
    dist.destroy_process_group()
    del wrapped
    gc.collect()
    return {"collected": True}


def fsdp(rank: int, world: int) -> dict:
    from torch.distributed.fsdp import fully_shard

    torch.sim.set_device(rank)
    device = f"sim:{rank}"
    model = small_model().to(device)
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    inputs, targets = training_batch()
    train(model, model.parameters(), my_shard(inputs, rank, world, device), my_shard(targets, rank, world, device))
    return {"parameters": [p.full_tensor().cpu().flatten().tolist() for p in model.parameters()],
            "shard_devices": sorted({str(p.to_local().device) for p in model.parameters()})}


def dead_rank(rank: int, world: int) -> dict:
    # every rank has joined the group (a rank that died earlier could fail the others while they join, not at the
    # collective), then the last one dies
    dist.barrier()
    if rank == world - 1:
        os._exit(3)
    try:
        dist.all_reduce(torch.ones(4, device="sim"))
        return {"raised": False}
    except RuntimeError as error:
        return {"raised": True, "error": str(error).splitlines()[0]}


def sanitized_ddp(rank: int, world: int) -> dict:
    """The DDP scenario under the explorer's stream sanitizer: what it found besides the scenario's results."""
    from pu1_explorer.sanitizer import stream_sanitizer

    with stream_sanitizer("sim") as report:
        results = ddp(rank, world)
    return {**results, "races": [race.to_text() for race in report.races], "operators": report.operators,
            "trace_events": report.trace_events}


SCENARIOS = {"collectives": (collectives, None), "ddp": (ddp, "simccl"), "fsdp": (fsdp, "simccl"),
             "dead_rank": (dead_rank, None), "ddp_collected_after_destroy": (ddp_collected_after_destroy, "simccl"),
             "sanitized_ddp": (sanitized_ddp, "simccl")}
DESTROYS_ITS_GROUP = ("dead_rank", "ddp_collected_after_destroy")


def main() -> None:
    scenario, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    run, backend = SCENARIOS[scenario]
    timeout = timedelta(seconds=float(os.environ.get("SIM_TEST_PG_TIMEOUT", "60")))
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    results = run(rank, world)
    print(json.dumps(results), flush=True)
    if scenario not in DESTROYS_ITS_GROUP:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
