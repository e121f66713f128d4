"""Client batching's ceiling: K equal clients' local rounds one after another (`train_local`) against one stacked
run (`train_local_batched`), local training only (no round driver, no evaluation), best of `--reps`.

Equal clients take the same number of steps, so every stacked step has all K clients: the most batching can give.
docs/explanation/workload.md's unequal clients get less (README, "Client batching").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def measure(
    clients: int, steps: int, batch_size: int, image: int, device: str, reps: int, threads: int
) -> dict[str, Any]:
    import torch

    from raytune_fl.engine.batched import train_local_batched
    from raytune_fl.engine.local import LocalData, LocalSettings, train_local
    from raytune_fl.engine.worker import ModelSpec
    from raytune_fl.methods import build_method
    from raytune_fl.methods.base import ClientContext

    torch.set_num_threads(threads)
    where = torch.device(device)
    settings = LocalSettings(epochs=1, batch_size=batch_size, lr=0.01, momentum=0.9, weight_decay=1e-4)
    spec = ModelSpec("simple_cnn", 1, 10, (image, image))
    n = batch_size * steps  # every client: `steps` full batches
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.normal(size=(clients * n, 1, image, image)).astype(np.float32), device=where)
    y = torch.tensor(rng.integers(0, 10, clients * n), device=where)
    parts = [(x[k * n : (k + 1) * n], y[k * n : (k + 1) * n]) for k in range(clients)]
    torch.manual_seed(0)
    start = spec.build().to(where).state_dict()
    model = spec.build().to(where)
    models = [spec.build().to(where) for _ in range(clients)]

    def sync() -> None:
        if where.type == "cuda":
            torch.cuda.synchronize()

    def sequential() -> None:
        for k, (xk, yk) in enumerate(parts):
            model.load_state_dict(start)
            generator = torch.Generator().manual_seed(k)
            train_local(model, build_method("fedavg", {}, 10), LocalData(xk, yk, 10), settings, generator)

    def stacked() -> None:
        for m in models:
            m.load_state_dict(start)
        contexts = [ClientContext(m, k, 1, *parts[k], settings.lr) for k, m in enumerate(models)]
        train_local_batched(
            models,
            [build_method("fedavg", {}, 10) for _ in range(clients)],
            LocalData(x, y, 10),
            settings,
            [torch.Generator().manual_seed(k) for k in range(clients)],
            contexts,
            [None] * clients,
        )

    def best(run: Callable[[], None]) -> float:
        run()  # warm-up: kernels, allocator
        times = []
        for _ in range(reps):
            sync()
            began = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - began)
        return min(times)

    one_by_one, together = best(sequential), best(stacked)
    return {
        "device": device,
        "clients": clients,
        "steps": steps,
        "batch_size": batch_size,
        "image": image,
        "sequential_s": one_by_one,
        "batched_s": together,
        "ms_per_client_step": 1000 * one_by_one / (clients * steps),
        "ms_per_stacked_step": 1000 * together / steps,
        "speedup": one_by_one / together,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10, help="K equal clients (default %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="local steps of each client (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64, help="default %(default)s (the workload's)")
    parser.add_argument("--image", type=int, default=28, help="square image side (default %(default)s)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions, best kept (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default %(default)s)")
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args(argv)
    for name in ("clients", "steps", "batch_size", "image", "reps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1 (got {getattr(args, name)})")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda: torch sees no CUDA device here", file=sys.stderr)
            return 2
    result = measure(args.clients, args.steps, args.batch_size, args.image, args.device, args.reps, args.threads)
    print(
        f"{result['clients']} equal clients x {result['steps']} steps (batch {result['batch_size']}, "
        f"{result['image']}x{result['image']}, {result['device']}): one by one {result['sequential_s']:.3f} s "
        f"({result['ms_per_client_step']:.1f} ms a client step), stacked {result['batched_s']:.3f} s "
        f"({result['ms_per_stacked_step']:.1f} ms a stacked step): {result['speedup']:.2f}x"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
