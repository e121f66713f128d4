"""benchmarks/cross_device.py's protocol in pfl-research 0.6 (its `pfl` way), written from pfl's documentation and
its CIFAR-10 benchmark (apple/pfl-research, benchmarks/image_classification): a FederatedDataset of the users, a
SimulatedBackend that sums their updates weighted by their samples (WeightByDatapoints), FederatedAveraging with
NNTrainHyperParams, a PyTorchModel whose central optimiser is SGD at rate 1 (the server adds the mean update).

Imported only by the pfl way's child, in an interpreter where pfl imports: nothing else in the repository needs pfl.

The same as the other ways: the images and users (cross_device_protocol.protocol_data), the users of each round
(the user sampler hands out cross_device_protocol.cohorts), the model (the project's simple_cnn with the same
initial weights; pfl calls the `loss` and `metrics` attached to it, as its benchmark models have), plain local SGD
at the same rate and batch, one local epoch, the test set evaluated after the same rounds at the same batch size.

Where pfl differs, by its design (kept):
- only parameters travel: PyTorchModel sends and averages `named_parameters`, not buffers, so BatchNorm's running
  statistics are never averaged; the one module every simulated user trains in keeps updating them, user after
  user, and the server evaluates with them.
- a user's batches come in its dataset's order (pfl's Dataset.iter does not shuffle): the dataset made for each
  sampled user here holds its images in a fresh seeded order, as the other ways draw one per round.
- central iteration 0 (round 1, a warm-up round) also evaluates each sampled user's data before and after its
  training (pfl's `evaluation_frequency` divides 0), set past the run so that no later round does.
- no evaluation before training (pfl's CentralEvaluationCallback makes one): the callback here evaluates after the
  protocol's rounds only, as the other ways do.
"""

from __future__ import annotations

import time
import types
from typing import TYPE_CHECKING, Any

import numpy as np

from raytune_fl.metrics import EVALUATE_S, TEST_ACC

if TYPE_CHECKING:
    from benchmarks.cross_device_protocol import Protocol


def run_pfl(protocol: Protocol, threads: int, started: float) -> dict[str, Any]:
    """The protocol through pfl in this process; the child's report (cross_device.run_plain's keys). `started`:
    when the child started, for its setup time."""
    import torch
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByDatapoints
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel

    from benchmarks.cross_device_protocol import cohorts, protocol_data
    from raytune_fl.models import build_model

    torch.set_num_threads(threads)
    x_np, y_np, x_test_np, y_test_np, users = protocol_data(protocol)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    central = Dataset(raw_data=[torch.from_numpy(x_test_np), torch.from_numpy(y_test_np)])

    # each round's cohort, in order: (round, user) as the "user id", so that a user's images get that round's order
    sampled = iter([(round_index, user) for round_index, c in enumerate(cohorts(protocol), 1) for user in c])

    def make_user(key: tuple[int, int]) -> Dataset:
        round_index, user = key
        rng = np.random.default_rng([protocol.seed, round_index, user])
        index = torch.from_numpy(rng.permutation(users[user]))
        return Dataset(raw_data=[x[index], y[index]], user_id=user)

    federated = FederatedDataset(make_user, lambda: next(sampled))

    def loss(self: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, eval: bool = False) -> torch.Tensor:
        self.eval() if eval else self.train()
        logits, _ = self(inputs)  # simple_cnn returns (logits, representation)
        return F.cross_entropy(logits, targets)

    @torch.no_grad()
    def metrics(self: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, eval: bool = True) -> dict:
        self.eval() if eval else self.train()
        logits, _ = self(inputs)
        correct = float((logits.argmax(1) == targets).sum())
        summed = float(F.cross_entropy(logits, targets, reduction="sum"))
        return {"loss": Weighted(summed, len(inputs)), "accuracy": Weighted(correct, len(inputs))}

    channels, height, width = protocol.image
    torch.manual_seed(protocol.seed)  # the plain loop's initial weights
    module = build_model("simple_cnn", channels, 10, (height, width))
    module.loss = types.MethodType(loss, module)
    module.metrics = types.MethodType(metrics, module)
    parameters = [p for p in module.parameters() if p.requires_grad]
    model = PyTorchModel(
        model=module, local_optimizer_create=torch.optim.SGD, central_optimizer=torch.optim.SGD(parameters, 1.0)
    )
    eval_params = NNEvalHyperParams(local_batch_size=protocol.eval_batch)
    report: dict[str, Any] = {"round_times": [], "evaluated": [], TEST_ACC: [], EVALUATE_S: []}

    class EvaluateAndStamp(TrainingProcessCallback):
        """Central evaluation after the protocol's rounds, then the round's end time."""

        def after_central_iteration(self, aggregate_metrics: Any, model: Any, *, central_iteration: int) -> Any:
            round_index = central_iteration + 1  # pfl counts from 0
            if protocol.evaluates(round_index):
                began = time.perf_counter()
                scores = model.evaluate(central, eval_params=eval_params).to_simple_dict(to_lowercase=True)
                report[EVALUATE_S].append(time.perf_counter() - began)
                report[TEST_ACC].append(float(scores["accuracy"]))
                report["evaluated"].append(round_index)
            stamps.append(time.perf_counter())
            return False, Metrics()

    params = NNAlgorithmParams(
        central_num_iterations=protocol.rounds,
        evaluation_frequency=protocol.rounds + 1,  # per-user evaluation at central iteration 0 only
        train_cohort_size=protocol.cohort,
        val_cohort_size=0,
    )
    backend = SimulatedBackend(training_data=federated, val_data=federated, postprocessors=[WeightByDatapoints()])
    train_params = NNTrainHyperParams(
        local_learning_rate=protocol.lr, local_num_epochs=1, local_batch_size=protocol.batch
    )
    stamps = [time.perf_counter()]
    report["setup_s"] = stamps[0] - started
    FederatedAveraging().run(
        algorithm_params=params,
        backend=backend,
        model=model,
        model_train_params=train_params,
        model_eval_params=eval_params,
        callbacks=[EvaluateAndStamp()],
        send_metrics_to_platform=False,  # pfl's generic platform would print every round's metrics
    )
    report["round_times"] = [b - a for a, b in zip(stamps, stamps[1:])]
    return report
