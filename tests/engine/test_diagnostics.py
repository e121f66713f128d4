"""Per-round diagnostics: hand-checked maths, and what the round driver reports when."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.diagnostics import (
    bottom_decile_mean,
    classifier_spectrum,
    loss_decomposition,
    per_client_accuracy,
    spectrum_summary,
)
from raytune_fl.engine.evaluation import SPECTRUM_KEY
from raytune_fl.engine.federation import Federation


def test_spectrum_of_a_hand_made_classifier():
    # rows scaled copies of orthonormal directions: singular values are the row norms, descending
    weight = np.array([[3.0, 0.0, 0.0], [0.0, 0.0, 4.0]], np.float32)
    s = classifier_spectrum({"classifier.weight": weight})
    np.testing.assert_allclose(s, [4.0, 3.0])
    summary = spectrum_summary(s)
    assert summary["sv_max"] == 4.0 and summary["sv_min"] == 3.0
    assert summary["sv_min_over_max"] == pytest.approx(0.75)
    # p = [4/7, 3/7]; exp(-(4/7 ln 4/7 + 3/7 ln 3/7)) = 1.9601...
    p = np.array([4 / 7, 3 / 7])
    assert summary["sv_effective_rank"] == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    assert spectrum_summary(np.ones(10))["sv_effective_rank"] == pytest.approx(10.0)  # flat: full rank
    assert spectrum_summary(np.array([2.0, 0.0]))["sv_effective_rank"] == pytest.approx(1.0)  # rank one
    with pytest.raises(KeyError, match="classifier"):
        classifier_spectrum({"fc.weight": weight})


def test_per_client_accuracy_by_hand():
    correct = np.array([1, 0, 1, 1, 1, 0], bool)
    owner = np.array([0, 0, 1, 1, 1, 3])  # client 2 holds nothing and is left out
    stats = per_client_accuracy(correct, owner, num_clients=4)
    # client accuracies 1/2, 3/3, 0/1: mean 0.5, worst 0, std sqrt(((0)^2 + 0.5^2 + 0.5^2) / 3)
    assert stats["client_acc_mean"] == pytest.approx(0.5)
    assert stats["client_acc_worst"] == 0.0
    assert stats["client_acc_std"] == pytest.approx(np.sqrt(0.5 / 3))
    assert stats["client_acc_var"] == pytest.approx(0.5 / 3)
    # 3 clients: the worst ceil(3/10) = 1 of them, client 3's 0; the 10th percentile is no longer reported
    assert stats["client_acc_bottom10"] == 0.0
    assert "client_acc_p10" not in stats


def test_the_bottom_decile_is_the_mean_of_the_worst_tenth_of_clients():
    ten = [0.9, 0.1, 0.5, 0.8, 0.7, 0.6, 0.95, 0.85, 0.75, 0.65]
    # K = 10: ceil(10/10) = 1 client, the worst alone (np.percentile(ten, 10) would give 0.1*0.1 + 0.9*0.5 = 0.46)
    assert bottom_decile_mean(np.array(ten)) == pytest.approx(0.1)
    # K = 11..20: ceil(K/10) = 2 clients, the mean of the worst two: (0.1 + 0.2) / 2
    for k in range(11, 21):
        acc = np.array([*ten, 0.2, *([0.99] * (k - 11))])
        assert bottom_decile_mean(acc) == pytest.approx(0.15), k
    # K = 21: 3 clients, order does not matter
    acc = np.array([0.3, *([0.99] * 18), 0.0, 0.6])
    assert bottom_decile_mean(acc) == pytest.approx(0.3)
    # through per_client_accuracy: 11 clients, one sample each, clients 0 and 1 wrong, the rest right -> (0 + 0) / 2;
    # with client 1 right instead it is (0 + 1) / 2
    owner = np.arange(11)
    assert per_client_accuracy(np.arange(11) >= 2, owner, 11)["client_acc_bottom10"] == 0.0
    assert per_client_accuracy(np.arange(11) != 0, owner, 11)["client_acc_bottom10"] == pytest.approx(0.5)


def test_loss_decomposition_by_hand_and_it_adds_up():
    # p = [1/4, 3/4]; local = 1/4*0.2 + 3/4*0.6 = 0.5; on global data = 1/4*1.0 + 3/4*2.0 = 1.75
    parts = loss_decomposition(global_loss=1.5, local_losses=[0.2, 0.6], shifted_losses=[1.0, 2.0], num_samples=[1, 3])
    assert parts["loss_local"] == pytest.approx(0.5)
    assert parts["loss_shift"] == pytest.approx(1.25)
    assert parts["loss_aggregation"] == pytest.approx(-0.25)  # averaging helped: the global model beats its clients
    assert sum(parts.values()) == pytest.approx(1.5)


def _experiment(**diagnostics) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "dataset": "digits",
            "partition": {"kind": "dirichlet", "alpha": 0.3, "clients": 4, "min_size": 20, "seed": 1},
            "rounds": 3,
            "batch_size": 32,
            "diagnostics": {"every": 2, **diagnostics},
        }
    )


def test_the_round_driver_reports_cheap_diagnostics_every_round_and_costly_ones_every_k():
    rows: list[dict] = []
    federation = Federation(_experiment(), "fedavg", {})
    federation.run(rows.append)
    for row in rows:
        assert len(row[SPECTRUM_KEY]) == 10  # digits: D = 10 singular values
        assert row["sv_max"] == pytest.approx(row[SPECTRUM_KEY][0])
        assert row["client_acc_worst"] <= row["client_acc_mean"] <= 1.0
    # every = 2 and the last round (3)
    assert ["loss_local" in row for row in rows] == [False, True, True]
    for row in rows[1:]:
        total = row["loss_local"] + row["loss_shift"] + row["loss_aggregation"]
        assert total == pytest.approx(row["val_loss"], rel=1e-9)
        assert row["loss_local"] < row["val_loss"]  # clients fit their own data better than the pooled data
    # each validation sample is attributed to the client whose held-out part it came from
    data = federation.data
    for cid, part in enumerate(data.val_parts):
        mine = data.val_indices[federation.val_owner == cid]
        assert np.array_equal(mine, np.sort(part))


def test_diagnostics_can_be_switched_off():
    rows: list[dict] = []
    Federation(_experiment(spectrum=False, client_accuracy=False, every=0), "fedavg", {}).run(rows.append)
    assert not any(k.startswith(("sv_", "client_acc", "loss_")) or k == SPECTRUM_KEY for k in rows[-1])


def test_fedbn_is_also_scored_with_each_clients_own_batchnorm():
    import torch

    from raytune_fl.engine.evaluation import predict
    from raytune_fl.methods.impl.fedbn import with_own_batchnorm
    from raytune_fl.weights import load_weights

    rows: list[dict] = []
    federation = Federation(_experiment(every=0), "fedbn", {})
    federation.run(rows.append)
    assert all("personal_val_acc" in row for row in rows)
    # recompute the last round by hand: client c's held-out samples under global weights + c's own BN
    hits = 0
    for cid in range(federation.data.num_clients):
        mine = torch.from_numpy(np.flatnonzero(federation.val_owner == cid))
        own = with_own_batchnorm(federation.weights, federation.client_states[cid])
        assert any(not np.array_equal(own[k], federation.weights[k]) for k in own)  # its BN differs from the mean
        load_weights(federation.model, own)
        hits += int(predict(federation.model, federation.val_x[mine], federation.val_y[mine], 500)[1].sum())
    assert rows[-1]["personal_val_acc"] == pytest.approx(hits / len(federation.val_y))
    assert rows[-1]["personal_client_acc_worst"] <= rows[-1]["personal_client_acc_mean"]
    plain: list[dict] = []
    Federation(_experiment(every=0), "fedavg", {}).run(plain.append)
    # the global model is every FedAvg client's: its personal_val_acc is its val_acc, and no spread of its own
    assert plain[-1]["personal_val_acc"] == plain[-1]["val_acc"]
    assert not any(k.startswith("personal_client_") for k in plain[-1])


# ---- gradient norms (diagnostics.gradient_norms)


def test_gradient_probe_by_hand():
    import torch

    from raytune_fl.engine.client_step import GradientProbe, flat_gradient

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    probe = GradientProbe(["a", "b"], 2, w.device)
    ce = (w**2).sum() / 2  # gradient w = [1, 2], norm sqrt(5)
    term_a = 3 * w[0]  # gradient [3, 0]; weighted by 2: [6, 0], norm 6, cosine with [1, 2]: 6 / (6 sqrt 5)
    term_b = torch.tensor(4.0)  # depends on no parameter: gradient 0, cosine 0
    probe.add(1, flat_gradient(ce, [w]), [2.0 * flat_gradient(term_a, [w]), 5.0 * flat_gradient(term_b, [w])])
    probe.add(1, flat_gradient(ce * 3, [w]), [])  # a phase without its terms: gradient [3, 6], terms 0
    means = probe.means(1)
    # total gradients [7, 2] (norm sqrt 53) and [3, 6] (norm sqrt 45); CE's norms sqrt 5 and 3 sqrt 5
    assert means["grad_norm_total"] == pytest.approx((53**0.5 + 45**0.5) / 2)
    assert means["grad_norm_ce"] == pytest.approx((5**0.5 + 3 * 5**0.5) / 2)
    assert means["grad_norm_a"] == pytest.approx(6 / 2)
    assert means["grad_cos_a"] == pytest.approx(5**-0.5 / 2)
    assert means["grad_norm_b"] == 0.0 and means["grad_cos_b"] == 0.0
    assert w.grad is None  # measured with autograd.grad: nothing left in .grad for the step
    assert set(probe.means(0).values()) == {0.0}  # client 0 was never measured


def test_gradient_norms_are_logged_on_the_costly_rounds_and_leave_training_unchanged():
    from tests.support.rounds import learning

    plain: list[dict] = []
    probed: list[dict] = []
    Federation(_experiment(), "univarfl", {}).run(plain.append)
    Federation(_experiment(gradient_norms=True), "univarfl", {}).run(probed.append)
    names = {"grad_norm_total", "grad_norm_ce", "grad_norm_variance", "grad_norm_energy"}
    names |= {"grad_cos_variance", "grad_cos_energy"}
    # every = 2 and the last round (3)
    assert [names <= row.keys() for row in probed] == [False, True, True]
    for row in probed[1:]:
        assert row["grad_norm_ce"] > 0 and row["grad_norm_variance"] > 0 and row["grad_norm_energy"] > 0
        assert -1 <= row["grad_cos_variance"] <= 1
    for a, b in zip(plain, probed, strict=True):  # the same weights, losses and scores round by round
        kept = {k: v for k, v in learning(b).items() if not k.startswith("grad_")}
        assert learning(a) == kept


def test_gradient_norms_need_costly_rounds():
    with pytest.raises(ValueError, match="gradient_norms: runs on the costly rounds"):
        _experiment(gradient_norms=True, every=0)


def test_gradient_norms_probe_the_costly_rounds_with_clients_still_batched():
    import types
    import warnings

    from raytune_fl.engine.federation import client_batch, probe_rounds

    experiment = _experiment(gradient_norms=True).model_copy(update={"rounds": 12})
    assert probe_rounds(experiment) == {2, 4, 6, 8, 10, 12}
    assert probe_rounds(_experiment()) == frozenset()
    five = experiment.model_copy(
        update={
            "diagnostics": experiment.diagnostics.model_copy(update={"every": 5}),
            "resources": experiment.resources.model_copy(update={"client_batch": 4}),
        }
    )
    assert probe_rounds(five) == {5, 10, 12}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no notice: the probe runs on the shared step, batched or not
        assert client_batch(five, types.SimpleNamespace(num_clients=4), "fedavg", None) == 4
