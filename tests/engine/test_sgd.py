"""engine/sgd.py: PlainSGD steps exactly as torch.optim.SGD does, by hand on a tiny tensor and bit for bit on a
model, and training never imports torch._dynamo (the memory it saves in every client actor)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from raytune_fl.engine.sgd import PlainSGD


def test_two_steps_with_momentum_and_weight_decay_by_hand():
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    opt = PlainSGD([w], lr=0.1, momentum=0.9, weight_decay=0.5)
    # loss = sum(w^2)/2: grad = w; with decay d = w + 0.5 w = 1.5 w
    for _ in range(2):
        opt.zero_grad()
        (w.pow(2).sum() / 2).backward()
        opt.step()
    # step 1: d1 = (1.5, -3), buf = d1, w1 = w0 - 0.1 d1 = (0.85, -1.7)
    # step 2: d2 = 1.5 w1 = (1.275, -2.55), buf = 0.9 d1 + d2 = (2.625, -5.25), w2 = w1 - 0.1 buf = (0.5875, -1.175)
    assert w.detach().tolist() == pytest.approx([0.5875, -1.175], abs=1e-6)
    assert opt.momentum_buffers[0].tolist() == pytest.approx([2.625, -5.25], abs=1e-6)


@pytest.mark.parametrize("momentum, weight_decay", [(0.9, 1e-5), (0.0, 0.0), (0.5, 0.01)])
def test_bit_for_bit_torch_sgd_on_a_model_with_a_frozen_parameter(momentum, weight_decay):
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    theirs.load_state_dict(ours.state_dict())
    ours[2].bias.grad = theirs[2].bias.grad = None
    plain = PlainSGD(ours.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)
    reference = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    for step in range(5):
        for model, opt in ((ours, plain), (theirs, reference)):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if step < 2:
                model[2].bias.grad = None  # a parameter without a gradient is skipped, its buffer kept
            opt.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)


def test_training_a_client_never_imports_torch_dynamo():
    code = (
        "import sys\n"
        "from benchmarks.workload import workload_config\n"
        "from raytune_fl.engine.federation import Federation, in_process_pool\n"
        "Federation(workload_config(rounds=1), 'fedavg', {}, pool_factory=in_process_pool).run(lambda m: None)\n"
        "print(sorted(m for m in ('torch._dynamo', 'triton') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
