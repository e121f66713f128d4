"""Local DP-SGD (engine/dp_sgd.py, steps.py's poisson_steps, the one-client loop under LocalSettings.privacy):
per-sample gradients, the clip, the noise, the Poisson batches, a seeded replay, Opacus's step, and which methods
can run per sample."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.dp_sgd import clip_factors, clipped_sum, noisy_mean, per_sample_gradients, private_problem
from raytune_fl.engine.federation import EngineNotice, Federation, in_process_pool, worker_spec
from raytune_fl.engine.local import LocalData, LocalSettings, train_local
from raytune_fl.engine.pool import InProcessPool
from raytune_fl.engine.sgd import PlainSGD
from raytune_fl.engine.steps import LocalPrivacy, poisson_steps
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, ClientContext
from raytune_fl.models import build_model
from raytune_fl.privacy.local import local_plan
from raytune_fl.weights import read_weights


class Tiny(nn.Module):
    """A two-layer model with the package's contract (logits, z), small enough to check by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.classifier = nn.Linear(3, 2)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = torch.tanh(self.body(x.flatten(1)))
        return self.classifier(z), z


def _tiny(seed: int = 0) -> Tiny:
    torch.manual_seed(seed)
    return Tiny().double()


def _batch(n: int = 5, seed: int = 1) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randint(0, 2, (n,), generator=g)


def _alone(model: nn.Module, x: Tensor, y: Tensor) -> list[Tensor]:
    """The gradient of one sample's cross-entropy, taken on a batch of that sample only."""
    model.zero_grad()
    F.cross_entropy(model(x.unsqueeze(0))[0], y.unsqueeze(0)).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_per_sample_gradients_equal_each_samples_gradient_taken_alone():
    model, (x, y) = _tiny(), _batch()
    grads, values = per_sample_gradients(model, [], 2, x, y)
    for i in range(5):
        for got, want in zip(grads, _alone(model, x[i], y[i])):
            torch.testing.assert_close(got[i], want, rtol=1e-12, atol=1e-14)
    ce = F.cross_entropy(model(x)[0], y, reduction="none")
    torch.testing.assert_close(values[:, 0], ce)  # loss = cross-entropy without terms
    assert values.shape == (5, 2)


def test_the_clip_scales_each_samples_whole_gradient_to_at_most_the_norm():
    # sample 0: (3, 4) over two parameters, norm 5 -> scaled by 2/5; sample 1: norm 1 <= 2, kept
    a = torch.tensor([[3.0], [0.6]], dtype=torch.float64)
    b = torch.tensor([[4.0, 0.0], [0.0, 0.8]], dtype=torch.float64)
    torch.testing.assert_close(clip_factors([a, b], 2.0), torch.tensor([0.4, 1.0], dtype=torch.float64))
    sum_a, sum_b = clipped_sum([a, b], 2.0)
    torch.testing.assert_close(sum_a, torch.tensor([3.0 * 0.4 + 0.6], dtype=torch.float64))
    torch.testing.assert_close(sum_b, torch.tensor([1.6, 0.8], dtype=torch.float64))


def test_the_noise_has_std_noise_multiplier_times_clip_and_the_fixed_denominator():
    privacy = LocalPrivacy(clip_norm=0.5, noise_multiplier=1.5)
    zeros = [torch.zeros(200_000, dtype=torch.float64), torch.full((3,), 8.0, dtype=torch.float64)]
    noisy, small = noisy_mean(zeros, privacy, 4.0, torch.Generator().manual_seed(0))
    # std 0.75 / 4; the sample std of 200,000 normals is within 0.5% of it (about 3 of its standard errors)
    assert abs(noisy.std().item() - 0.75 / 4) < 0.005 * 0.75 / 4
    assert abs(noisy.mean().item()) < 4 * 0.75 / 4 / math.sqrt(200_000)
    silent = noisy_mean([zeros[1]], LocalPrivacy(0.5, 0.0), 4.0, torch.Generator())
    torch.testing.assert_close(silent[0], torch.full((3,), 2.0, dtype=torch.float64))  # 8 / 4, never / drawn size


def test_poisson_batches_have_mean_qn_and_variance_q_1_minus_q_n():
    n, batch = 40, 10  # q = 1/4: mean 10, variance 7.5
    settings = LocalSettings(epochs=50, batch_size=batch, lr=0.1, momentum=0.0, weight_decay=0.0)
    settings = LocalSettings(**{**settings.__dict__, "privacy": LocalPrivacy(1.0, 1.0)})
    steps = poisson_steps(n, settings, torch.Generator().manual_seed(0), 50, None)
    assert len(steps) == local_plan(n, batch, 50).steps_per_round == 200
    sizes = torch.tensor([float(step.index.numel()) for step in steps])
    # 200 draws: the mean's standard error is sqrt(7.5 / 200) = 0.19, the variance's about 0.75
    assert abs(sizes.mean().item() - 10.0) < 0.6 and abs(sizes.var().item() - 7.5) < 2.5
    assert all(step.index.unique().numel() == step.index.numel() < n + 1 for step in steps)
    assert sum(step.first for step in steps) == 50  # a local epoch: ceil(40 / 10) = 4 steps
    assert len(poisson_steps(n, settings, torch.Generator(), 50, 7)) == 7  # a step budget: exactly that many


def _private_settings(noise: float = 1.0, batch: int = 4, epochs: int = 2) -> LocalSettings:
    return LocalSettings(epochs, batch, 0.1, 0.9, 1e-3, privacy=LocalPrivacy(1.0, noise))


def _train(seed: int, settings: LocalSettings, n: int = 10) -> tuple[list[Tensor], int]:
    """A DP-SGD round of FedProx (a term that reads the parameters) on the Tiny model; its weights and steps."""
    model, (x, y) = _tiny(), _batch(n)
    method = build_method("fedprox", {"mu": 0.1}, 2)
    result = train_local(model, method, LocalData(x, y, 2), settings, torch.Generator().manual_seed(seed))
    assert all(math.isfinite(v) for v in result.metrics.values())
    return [p.detach().clone() for p in model.parameters()], result.steps


def test_a_seeded_round_replays_bit_for_bit_and_takes_the_plans_steps():
    first, steps = _train(3, _private_settings())
    again, _ = _train(3, _private_settings())
    other, _ = _train(4, _private_settings())
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
    assert steps == local_plan(10, 4, 2).steps_per_round == 6


def test_an_empty_batch_is_a_noise_only_step_that_counts():
    # a client of 3 samples at batch size 1, q = 1/3: (2/3)^3 of the 30 steps draw nobody, about 9
    settings = LocalSettings(10, 1, 0.1, 0.0, 0.0, privacy=LocalPrivacy(1.0, 1.0))
    steps = poisson_steps(3, settings, torch.Generator().manual_seed(5), 10, None)
    assert any(step.index.numel() == 0 for step in steps)
    weights, taken = _train(5, settings, n=3)
    assert taken == 30 and all(torch.isfinite(w).all() for w in weights)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # Opacus's hooks, on inputs without gradients
def test_one_dp_sgd_step_equals_opacus_dp_optimizer_without_noise():
    """Compared with Opacus 1.6 on the Tiny model and a batch of 6, float64: GradSampleModule's per-sample gradients
    (loss_reduction mean) against ours to 1e-12, and one step of its DPOptimizer (noise_multiplier 0, max_grad_norm
    0.05 so most samples are clipped, expected_batch_size 8, torch SGD lr 0.5) against our clipped sum / 8 and
    PlainSGD's step, to 1e-5 relative: Opacus divides by (norm + 1e-6), we by max(norm, clip)."""
    # the privacy extra: in the dev install; the lower-bounds venv (tools/fresh_install.sh) has the wheel alone
    pytest.importorskip("opacus", reason="opacus (raytune-fl[privacy]) is not installed")
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    x, y = _batch(6, seed=2)
    ours, theirs = _tiny(), _tiny()
    grads, _ = per_sample_gradients(ours, [], 2, x, y)
    module = GradSampleModule(theirs)
    optimizer = DPOptimizer(
        torch.optim.SGD(theirs.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=0.05, expected_batch_size=8
    )
    optimizer.zero_grad()
    F.cross_entropy(module(x)[0], y).backward()
    for mine, p in zip(grads, theirs.parameters()):
        torch.testing.assert_close(mine, p.grad_sample, rtol=1e-12, atol=1e-14)
    assert (clip_factors(grads, 0.05) < 1).sum() >= 4
    optimizer.step()
    sgd = PlainSGD(list(ours.parameters()), lr=0.5)
    for p, g in zip(sgd.params, clipped_sum(grads, 0.05)):
        p.grad = g / 8
    sgd.step()
    for mine, p in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(mine.detach(), p.detach(), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("name", METHODS.names())
def test_each_methods_per_sample_declaration_matches_its_hooks_and_its_terms_per_sample(name):
    """A spec without `per_sample` has hooks that all run per sample, and its loss (cross-entropy plus its terms)
    differentiated per sample equals each sample's loss taken alone; one with it has a hook that says why not."""
    method = build_method(name, {}, 2)
    declared = METHODS.get(name).per_sample
    assert bool(declared) == any(not getattr(hook, "per_sample", True) for hook in method.all_hooks), name
    if declared or not method.terms:
        return
    model, (x, y) = _tiny(), _batch(4)
    previous = {"contrastive": read_weights(_tiny(seed=5))}  # MOON's previous model: its term is then not 0
    ctx = ClientContext(model, client_id=0, round_index=1, x=x, y=y, lr=0.1, state=previous)
    for hook in method.all_hooks:
        hook.on_round_start(ctx)
    with torch.no_grad():  # away from the anchors the round started at: FedProx's and FedDyn's pulls are not 0
        for p in model.parameters():
            p.add_(0.1)
    grads, _ = per_sample_gradients(model, method.terms, 2, x, y)
    for i in range(4):
        model.zero_grad()
        logits, z = model(x[i : i + 1])
        loss = F.cross_entropy(logits, y[i : i + 1])
        batch = Batch(x[i : i + 1], y[i : i + 1], logits, z, model, 2)
        for term in method.terms:
            loss = loss + term.weight * term.loss(batch)
        loss.backward()
        for got, p in zip(grads, model.parameters()):
            torch.testing.assert_close(got[i], p.grad, rtol=1e-10, atol=1e-12)


def test_the_clients_own_check_refuses_batchnorm_in_train_mode_precision_and_coupled_terms():
    settings = _private_settings()
    fedavg = build_method("fedavg", {}, 10)
    assert private_problem(build_model("simple_cnn_gn", 1, 10, (8, 8)), fedavg, settings) == ""
    assert private_problem(build_model("simple_cnn", 1, 10, (8, 8)), fedavg, settings).startswith("model: BatchNorm")
    assert private_problem(build_model("simple_cnn", 1, 10, (8, 8)).eval(), fedavg, settings) == ""
    official = build_method("fedld", {"fidelity": "official"}, 10)
    assert "'margin'" in private_problem(_tiny(), official, settings)
    half = LocalSettings(1, 4, 0.1, 0.0, 0.0, precision="bf16", privacy=LocalPrivacy(1.0, 1.0))
    assert private_problem(_tiny(), fedavg, half).startswith("precision: ")


EXPERIMENT = ExperimentConfig.model_validate(
    {
        "dataset": "synthetic",
        "synthetic": {"shape": [1, 8, 8], "classes": 4, "samples": 96, "test_samples": 16, "seed": 0},
        "partition": {"kind": "iid", "clients": 3, "min_size": 8},
        "model": "simple_cnn_gn",
        "rounds": 2,
        "batch_size": 8,
        "privacy": {"mechanism": "local"},
        "resources": {"actors": 0, "client_batch": 2},
    }
)


class RecordingPool(InProcessPool):
    """The in-process pool, keeping every update it returns (what the server's accountant reads)."""

    updates: list = []

    def collect(self, tickets):
        outcomes = super().collect(tickets)
        RecordingPool.updates += list(outcomes.values())
        return outcomes


def test_a_local_dp_federation_trains_and_reports_the_plans_steps(one_thread):
    RecordingPool.updates = []
    rows: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        federation = Federation(
            EXPERIMENT, "fedavg", {}, pool_factory=lambda d, s: RecordingPool(in_process_pool(d, s).worker)
        )
        federation.run(rows.append)
    assert any(issubclass(w.category, EngineNotice) and "local DP-SGD" in str(w.message) for w in caught)
    assert len(rows) == 2 and all(math.isfinite(row["train_loss"]) for row in rows)
    assert len(RecordingPool.updates) == 6
    for update in RecordingPool.updates:
        assert update.num_steps == local_plan(update.num_samples, 8, 1).steps_per_round
    spec = worker_spec(EXPERIMENT, federation.data, "fedavg", {})
    assert spec.local.privacy == LocalPrivacy(1.0, 1.0) and spec.client_batch == 1
