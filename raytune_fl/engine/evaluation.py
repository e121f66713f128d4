"""Scoring the global model: validation and test metrics, the cheap diagnostics, personalised accuracy
(method.personalise, fine-tuning at evaluation), the clients' own test parts (partition.test_fraction) and FedLD's
loss decomposition, all on one model the weights are loaded into."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from raytune_fl.config import DiagnosticsConfig
from raytune_fl.engine.chance import at_chance, collapsed, pooled_bound, split_bound
from raytune_fl.engine.data import FederatedData
from raytune_fl.engine.diagnostics import (
    classifier_spectrum,
    client_accuracies,
    loss_decomposition,
    per_client_accuracy,
    spectrum_summary,
)
from raytune_fl.engine.finetune import FinetuneRun
from raytune_fl.engine.precision import Precision, check_precision, mixed_forward
from raytune_fl.engine.report import CLIENT_ACC_KEY, SPECTRUM_KEY
from raytune_fl.metrics import (
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_WORST,
    CLIENT_TEST_ACC,
    CLIENT_TEST_ACC_BOTTOM10,
    CLIENT_TEST_ACC_MEAN,
    CLIENT_TEST_ACC_WORST,
    COLLAPSED,
    PERSONAL_PREFIX,
    PERSONAL_TEST_ACC,
    PERSONAL_TEST_ACC_BOTTOM10,
    PERSONAL_TEST_ACC_MEAN,
    PERSONAL_TEST_ACC_WORST,
    PERSONAL_VAL_ACC,
    TEST_ACC,
    TEST_CHANCE,
    TEST_LOSS,
    TRAIN_NAMES,
    VAL_ACC,
    VAL_CHANCE,
    VAL_LOSS,
)
from raytune_fl.types import ClientUpdate, Weights
from raytune_fl.weights import load_weights

Personalise = Callable[[Weights, Mapping[str, Any]], Weights]  # a method's: the model a client uses

# the clients' own test parts: the pooled accuracy and the spread, under the global model and the model each uses
CLIENT_TEST_NAMES = (CLIENT_TEST_ACC, CLIENT_TEST_ACC_MEAN, CLIENT_TEST_ACC_WORST, CLIENT_TEST_ACC_BOTTOM10)
PERSONAL_TEST_NAMES = (PERSONAL_TEST_ACC, PERSONAL_TEST_ACC_MEAN, PERSONAL_TEST_ACC_WORST, PERSONAL_TEST_ACC_BOTTOM10)


def owners(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Which client each sample of the sorted union of `parts` belongs to."""
    if not len(parts):
        return np.zeros(0, dtype=np.int64)
    owner = np.concatenate([np.full(len(part), cid) for cid, part in enumerate(parts)])
    return owner[np.argsort(np.concatenate(parts), kind="stable")]


def own_test_scores(correct: np.ndarray, owner: np.ndarray, num_clients: int, names: Sequence[str]) -> dict:
    """The clients' own test parts under one model per client: sample-weighted (pooled), then the unweighted mean,
    worst and worst-decile mean over the clients with a test part (per_client_accuracy's definitions), under
    `names` (CLIENT_TEST_NAMES or PERSONAL_TEST_NAMES). Nothing without a test part."""
    if not len(correct):
        return {}
    spread = per_client_accuracy(correct, owner, num_clients)
    values = (float(correct.mean()), spread[CLIENT_ACC_MEAN], spread[CLIENT_ACC_WORST], spread[CLIENT_ACC_BOTTOM10])
    return dict(zip(names, values))


@torch.no_grad()
def predict(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, precision: Precision = "fp32"
) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample cross-entropy and correctness of `model` in eval mode.

    The batches are computed where the model is (`x`, `y` best already there: `Evaluator` uploads its sets once);
    the results stay there until one copy back at the end, so a GPU is never waited on per batch. `precision`:
    the forward pass in autocast (engine/precision.py), its logits cast to float32 before the loss."""
    model.eval()
    device = next(model.parameters()).device
    forward = mixed_forward(precision, device)
    losses, correct = [], []
    for start in range(0, x.shape[0], batch_size):
        xb, yb = x[start : start + batch_size].to(device), y[start : start + batch_size].to(device)
        logits, _ = forward(model, xb)
        losses.append(F.cross_entropy(logits, yb, reduction="none").double())
        correct.append(logits.argmax(dim=1) == yb)
    if not losses:
        return np.zeros(0), np.zeros(0, dtype=bool)
    return torch.cat(losses).cpu().numpy(), torch.cat(correct).cpu().numpy()


def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, precision: Precision = "fp32"
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of `model` in eval mode."""
    losses, correct = predict(model, x, y, batch_size, precision)
    n = max(len(losses), 1)
    return float(losses.sum()) / n, float(correct.sum()) / n


def mean_client_metrics(updates: Sequence[ClientUpdate]) -> dict[str, float]:
    """Sample-weighted mean of the clients' local training metrics."""
    if not updates:
        return {}
    total = sum(u.num_samples for u in updates)
    keys = updates[0].metrics.keys()
    return {TRAIN_NAMES.get(k, k): sum(u.metrics[k] * u.num_samples for u in updates) / total for k in keys}


class Evaluator:
    """The validation and test sets as tensors, and the model that weights are loaded into to score them.

    Every method leaves the model holding the weights it was given as `weights` (the global model).
    """

    def __init__(
        self,
        data: FederatedData,
        model: torch.nn.Module,
        batch_size: int,
        diagnostics: DiagnosticsConfig,
        precision: Precision = "fp32",
        finetune: FinetuneRun | None = None,
    ) -> None:
        self.data, self.model, self.batch_size, self.diagnostics = data, model, batch_size, diagnostics
        # the held-out sets live where the model is: uploaded once, not per round
        self.device = device = next(model.parameters()).device
        check_precision(precision, device)  # the trial's process: refused as it builds, before any round
        self.precision = precision
        dataset = data.dataset
        val = data.val_indices
        self.val_x = torch.from_numpy(dataset.x_train[val]).to(device)
        self.val_y = torch.from_numpy(dataset.y_train[val]).to(device)
        # which client each validation sample belongs to: per-client accuracy comes from the same pass
        self.val_owner = owners(data.val_parts)
        # the clients' own test parts (partition.test_fraction), from the training arrays; empty without a split
        mine = np.sort(np.concatenate(data.client_test_parts)) if data.num_clients else np.zeros(0, dtype=np.int64)
        self.client_test_x = torch.from_numpy(dataset.x_train[mine]).to(device)
        self.client_test_y = torch.from_numpy(dataset.y_train[mine]).to(device)
        self.client_test_owner = owners(data.client_test_parts)
        self.finetune = finetune  # personalisation at evaluation (engine/finetune.py); None: off
        # evaluation batches stay NCHW: the first convolution converts them, no second copy of the test set
        self.test_x, self.test_y = (
            torch.from_numpy(dataset.x_test).to(device),
            torch.from_numpy(dataset.y_test).to(device),
        )
        self._train_set: tuple[torch.Tensor, torch.Tensor] | None = None  # the loss decomposition's, on first use
        # what a model that learned nothing stays under on each split (engine/chance.py): fixed by the labels, so
        # computed once; NaN for a split with no samples (no validation split), which then never flags a round
        self.val_chance = split_bound(dataset.y_train[val].tolist(), dataset.num_classes)
        self.test_chance = split_bound(dataset.y_test.tolist(), dataset.num_classes)
        own_labels = (dataset.y_train[part].tolist() for part in data.val_parts)
        self.personal_val_chance = pooled_bound(own_labels, dataset.num_classes)

    def evaluate(
        self,
        weights: Weights,
        personalise: Personalise | None,
        client_states: Mapping[int, Any],
        extra: Mapping[str, Weights] | None = None,
        round_index: int = 0,
    ) -> dict[str, Any]:
        """The global model's metrics, the clients' own test parts, personalised accuracy when the method has it (or
        fine-tunes: `round_index` keys its random numbers), the server's other models (`extra`, by name:
        `<name>_val_acc`, ...) and the cheap diagnostics."""
        load_weights(self.model, weights)
        size, num_clients = self.batch_size, self.data.num_clients
        val_losses, val_correct = predict(self.model, self.val_x, self.val_y, size, self.precision)
        test_loss, test_acc = evaluate(self.model, self.test_x, self.test_y, size, self.precision)
        metrics: dict[str, Any] = {
            # no validation split (partition.val_fraction 0): NaN, not a score of 0 that reads as a real one
            VAL_LOSS: float(val_losses.mean()) if len(val_losses) else math.nan,
            VAL_ACC: float(val_correct.mean()) if len(val_correct) else math.nan,
            TEST_LOSS: test_loss,
            TEST_ACC: test_acc,
        }
        metrics[VAL_CHANCE], metrics[TEST_CHANCE] = self.val_chance, self.test_chance
        scores = ((metrics[VAL_ACC], self.val_chance), (test_acc, self.test_chance))
        metrics[COLLAPSED] = float(collapsed(scores))  # a number (0/1), so that it is logged with the scores
        own_test = predict(self.model, self.client_test_x, self.client_test_y, size, self.precision)[1]
        metrics.update(own_test_scores(own_test, self.client_test_owner, num_clients, CLIENT_TEST_NAMES))
        if personalise is not None or self.finetune is not None:
            metrics.update(self.evaluate_personalised(weights, personalise, client_states, round_index))
            # judged on the models its clients use (engine/chance.py): its global model may stay near chance;
            # without a validation split, on the global scores as before
            if not math.isnan(self.personal_val_chance):
                metrics[COLLAPSED] = float(at_chance(metrics[PERSONAL_VAL_ACC], self.personal_val_chance))
        else:  # every client uses the global model: its personal scores are the ones above, no second pass
            metrics[PERSONAL_VAL_ACC] = metrics[VAL_ACC]  # a table tunes global and personal rows on one metric
            metrics.update(own_test_scores(own_test, self.client_test_owner, num_clients, PERSONAL_TEST_NAMES))
        if extra:
            metrics.update(self.evaluate_extra(weights, extra))
        wanted = self.diagnostics
        if wanted.client_accuracy:
            metrics.update(per_client_accuracy(val_correct, self.val_owner, num_clients))
            # the full spread, for the dashboard; a list: the logger files it as an artifact, not a metric
            metrics[CLIENT_ACC_KEY] = client_accuracies(val_correct, self.val_owner, num_clients).tolist()
        if wanted.spectrum:
            spectrum = classifier_spectrum(weights)
            metrics.update(spectrum_summary(spectrum))
            metrics[SPECTRUM_KEY] = spectrum.tolist()  # a list: the logger files it as an artifact, not a metric
        return metrics

    def evaluate_extra(self, weights: Weights, extra: Mapping[str, Weights]) -> dict[str, float]:
        """The server's other models, by name (`<name>_val_acc`, ...); the model holds the global weights after."""
        size, metrics = self.batch_size, {}
        for name, other in extra.items():
            load_weights(self.model, {**weights, **other})
            losses, correct = predict(self.model, self.val_x, self.val_y, size, self.precision)
            other_test_loss, other_test_acc = evaluate(self.model, self.test_x, self.test_y, size, self.precision)
            metrics[f"{name}_{VAL_LOSS}"] = float(losses.mean()) if len(losses) else math.nan
            metrics[f"{name}_{VAL_ACC}"] = float(correct.mean()) if len(correct) else math.nan
            metrics[f"{name}_{TEST_LOSS}"], metrics[f"{name}_{TEST_ACC}"] = other_test_loss, other_test_acc
        load_weights(self.model, weights)  # the model holds the global weights again
        return metrics

    def evaluate_personalised(
        self,
        weights: Weights,
        personalise: Personalise | None,
        client_states: Mapping[int, Any],
        round_index: int = 0,
    ) -> dict[str, float]:
        """Each client's held-out samples (validation part, own test part) under the model that client uses: its
        own (method.personalise) or the global one, fine-tuned on its training samples where fine-tuning is on."""
        num_clients = self.data.num_clients
        val_correct = np.zeros(len(self.val_y), dtype=bool)
        test_correct = np.zeros(len(self.client_test_y), dtype=bool)
        for cid in range(num_clients):
            val_mine = np.flatnonzero(self.val_owner == cid)
            test_mine = np.flatnonzero(self.client_test_owner == cid)
            if len(val_mine) == 0 and len(test_mine) == 0:
                continue
            own = weights if personalise is None else personalise(weights, client_states.get(cid, {}))
            load_weights(self.model, own)
            if self.finetune is not None:
                self.finetune.train(self.model, cid, round_index)
            val_correct[val_mine] = self._correct(self.val_x, self.val_y, val_mine)
            test_correct[test_mine] = self._correct(self.client_test_x, self.client_test_y, test_mine)
        load_weights(self.model, weights)
        spread = per_client_accuracy(val_correct, self.val_owner, num_clients)
        metrics = {PERSONAL_VAL_ACC: float(val_correct.mean()) if len(val_correct) else math.nan}
        metrics.update({PERSONAL_PREFIX + k: v for k, v in spread.items()})
        return {**metrics, **own_test_scores(test_correct, self.client_test_owner, num_clients, PERSONAL_TEST_NAMES)}

    def _correct(self, x: torch.Tensor, y: torch.Tensor, rows: np.ndarray) -> np.ndarray:
        """Correctness of the loaded model on `rows` of (x, y)."""
        if not len(rows):
            return np.zeros(0, dtype=bool)
        index = torch.from_numpy(rows).to(self.device)
        return predict(self.model, x[index], y[index], self.batch_size, self.precision)[1]

    def decompose_loss(
        self, weights: Weights, start_weights: Weights, updates: Sequence[ClientUpdate], val_loss: float
    ) -> dict:
        """FedLD's Eq. 2 for this round's clients: evaluates each client model on its own and on the global data."""
        size = self.batch_size
        if self._train_set is None:
            dataset = self.data.dataset
            self._train_set = (
                torch.from_numpy(dataset.x_train).to(self.device),
                torch.from_numpy(dataset.y_train).to(self.device),
            )
        x, y = self._train_set
        if any(update.summed is not None for update in updates):  # Federation.sums_round keeps these rounds' deltas
            raise ValueError("the loss decomposition needs each client's delta; this round's were summed by worker")
        local, shifted = [], []
        for update in updates:
            client_weights = {
                k: start_weights[k] + update.delta[k] if k in update.delta else v for k, v in start_weights.items()
            }
            client_weights.update(update.buffers)
            load_weights(self.model, client_weights)
            own = torch.from_numpy(self.data.train_parts[update.client_id]).to(self.device)
            local.append(evaluate(self.model, x[own], y[own], size, self.precision)[0])
            shifted.append(evaluate(self.model, self.val_x, self.val_y, size, self.precision)[0])
        load_weights(self.model, weights)
        return loss_decomposition(val_loss, local, shifted, [u.num_samples for u in updates])
