"""Where a cross-device client's time goes, on one CPU thread (a client actor's setting): the engine's whole client
round (`ClientWorker.train`) against the same steps run bare, what loading the global model costs, the step's
kernels by kind, and whether two processes side by side slow each other's steps.

- `client`: per client, `ClientWorker.train` (load, data, the local loop, the update) and the bare steps (forward,
  cross-entropy, backward, SGD on the same batch size, no engine), interleaved client by client; the difference is
  the engine's own share. Plus `load_weights` against `load_state_dict` of the same weights.
- `kernels`: torch.profiler over bare steps: self CPU time by kind (convolution, BatchNorm, ReLU, the SGD update,
  the rest).
- `pair`: a bare step's time in one process alone, then in two processes at once.

Every figure is from this run; the protocol is benchmarks/cross_device.py's (`--image`, `--batch`, `--samples`).
`python -m benchmarks.client_time` prints the lines; `--json PATH` writes them too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

KINDS = {  # torch.profiler op names by the part of a step they are
    "convolution": ("conv",),
    "batchnorm": ("batch_norm",),
    "relu": ("clamp_min", "threshold_backward", "relu"),
    "sgd update": ("sgd", "add_", "zero_grad"),
}


def _setup(image: int, batch: int, samples: int) -> tuple[Any, Any, Any]:
    """A worker on the cross-device protocol's synthetic users, its global weights, and the protocol."""
    import torch

    from benchmarks.cross_device import Protocol, engine_config
    from raytune_fl.engine.data import prepare_data
    from raytune_fl.engine.federation import worker_spec
    from raytune_fl.engine.worker import ClientWorker
    from raytune_fl.weights import read_weights

    torch.set_num_threads(1)
    protocol = Protocol(users=100, samples_per_user=samples, cohort=10, batch=batch, image=(3, image, image))
    experiment = engine_config(protocol)
    data = prepare_data(experiment)
    worker = ClientWorker(
        worker_spec(experiment, data, "fedavg", {}), data.dataset.x_train, data.dataset.y_train, data.train_parts
    )
    return worker, read_weights(worker.model), protocol


def bare_steps(worker: Any, steps: int, batch: int) -> Callable[[], None]:
    """`steps` plain SGD steps of a copy of the worker's model on random batches of the worker's images."""
    import copy

    import torch
    import torch.nn.functional as F

    model = copy.deepcopy(worker.model)
    x, y = worker.spec.model.images(worker.x), worker.y
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def run() -> None:
        for _ in range(steps):
            index = torch.randint(0, len(y), (batch,))
            logits, _ = model(x[index])
            loss = F.cross_entropy(logits, y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return run


def _ms(run: Callable[[], Any]) -> float:
    began = time.perf_counter()
    run()
    return 1000 * (time.perf_counter() - began)


def client(clients: int, image: int, batch: int, samples: int) -> dict[str, float]:
    from raytune_fl.weights import as_tensor, load_weights

    worker, weights, _ = _setup(image, batch, samples)
    steps = -(-samples // batch)
    bare = bare_steps(worker, steps, batch)
    worker.train(0, 1, weights), bare()  # warm-up
    engine, plain, fast, full = [], [], [], []
    for round_index in range(2, 2 + clients):
        engine.append(_ms(lambda r=round_index: worker.train(r % 100, r, weights)))
        plain.append(_ms(bare))
        fast.append(_ms(lambda: load_weights(worker.model, weights)))
        # what load_weights did before: every array as a tensor, then load_state_dict
        full.append(_ms(lambda: worker.model.load_state_dict({k: as_tensor(v) for k, v in weights.items()})))
    median = statistics.median
    return {
        "client_ms": median(engine),
        "bare_steps_ms": median(plain),
        "engine_share": 1 - median(plain) / median(engine),
        "load_weights_ms": median(fast),
        "load_state_dict_ms": median(full),
    }


def kernels(image: int, batch: int, samples: int, steps: int = 100) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    worker, _, _ = _setup(image, batch, samples)
    bare = bare_steps(worker, steps, batch)
    bare()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        bare()
    shares = dict.fromkeys([*KINDS, "other"], 0.0)
    for event in prof.key_averages():
        kind = next((k for k, marks in KINDS.items() if any(m in event.key.lower() for m in marks)), "other")
        shares[kind] += event.self_cpu_time_total
    total = sum(shares.values())
    return {"step_ms": total / 1000 / steps, **{kind: value / total for kind, value in shares.items()}}


def pair(image: int, batch: int, samples: int) -> dict[str, float]:
    """A bare step alone (this process's child), then in two children at once."""
    command = [sys.executable, "-m", "benchmarks.client_time", "--child-step", "--image", str(image)]
    command += ["--batch", str(batch), "--samples", str(samples)]
    alone = float(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()[-1])
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    together = [float(child.communicate()[0].split()[-1]) for child in children]
    return {"alone_ms": alone, "together_ms": max(together)}


def _child_step(image: int, batch: int, samples: int) -> None:
    worker, _, _ = _setup(image, batch, samples)
    bare = bare_steps(worker, 200, batch)
    bare()
    print(_ms(bare) / 200)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100, help="client rounds timed (default %(default)s)")
    parser.add_argument("--image", type=int, default=32, help="square 3-channel images (default %(default)s)")
    parser.add_argument("--batch", type=int, default=10, help="local batch size (default %(default)s)")
    parser.add_argument("--samples", type=int, default=50, help="images per client (default %(default)s)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--child-step", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("clients", "image", "batch", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be at least 1 (got {getattr(args, name)})")
    if args.child_step:
        _child_step(args.image, args.batch, args.samples)
        return 0
    sizes = (args.image, args.batch, args.samples)
    found = {"client": client(args.clients, *sizes), "kernels": kernels(*sizes), "pair": pair(*sizes)}
    c, k, p = found["client"], found["kernels"], found["pair"]
    print(
        f"client round ({args.samples} images, batch {args.batch}, {args.image}x{args.image}, one thread): "
        f"{c['client_ms']:.2f} ms in the engine, {c['bare_steps_ms']:.2f} ms as bare steps: the engine's own "
        f"share {100 * c['engine_share']:.0f} %"
    )
    print(
        f"loading the global model: load_weights {c['load_weights_ms']:.3f} ms, load_state_dict "
        f"{c['load_state_dict_ms']:.3f} ms"
    )
    kinds = ", ".join(f"{kind} {100 * k[kind]:.0f} %" for kind in [*KINDS, "other"])
    print(f"a bare step: {k['step_ms']:.2f} ms; self CPU time: {kinds}")
    print(f"two processes side by side: a step {p['together_ms']:.2f} ms against {p['alone_ms']:.2f} ms alone")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(found, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
