"""One local loop, two ways to run it (engine/steps.py): the sequential loop (engine/local.py) and the stacked one
(engine/batched.py) train on the same step plan from the same seeds, and count their losses with one bookkeeping."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from raytune_fl.engine.augment import AugmentSpec
from raytune_fl.engine.batched import train_local_batched
from raytune_fl.engine.local import LocalData, LocalSettings, NonFiniteLossError, train_local
from raytune_fl.engine.steps import LossTotals, StepGroup, pass_batches, phase_plan
from raytune_fl.methods import build_method
from raytune_fl.methods.base import Batch, ClientContext, LocalTerm, Method, MethodContext, Phase
from raytune_fl.metrics import LOCAL_CE, LOCAL_LOSS, TERM_PREFIX
from raytune_fl.models import build_model

SIZES = (13, 7, 10)  # batches of 4: 3 steps a pass (the last sample alone is skipped), 2 steps, 3 steps
STARTS = (0, 13, 20)
SETTINGS = LocalSettings(epochs=2, batch_size=4, lr=0.05, momentum=0.9, weight_decay=1e-4)
AUGMENTED = dataclasses.replace(SETTINGS, augment=AugmentSpec(crop_padding=2, horizontal_flip=True))
SEEDS = (11, 12, 13)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    n = sum(SIZES)
    return torch.randn(n, 1, 8, 8, generator=generator), torch.randint(0, 10, (n,), generator=generator)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("simple_cnn", 1, 10, (8, 8))


def _fedavg() -> Method:
    return build_method("fedavg", {}, MethodContext(10))


_SAMPLES = StepGroup.samples  # the loops' own, which each recorder wraps


class _Recorder:
    """Every step's samples as the loops take them (StepGroup.samples), per client: (indices, offsets, flips),
    each client's indices counted from its own first row. `alone`: the client the sequential loop is training
    (its rows are its own); None: the stacked loop's rows, into the clients' data concatenated."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: dict[int, list[tuple[list[int], list, list]]] = {k: [] for k in range(len(SIZES))}
        self.alone: int | None = None

        def record(group: StepGroup, x: torch.Tensor, y: torch.Tensor, spec: AugmentSpec):
            for i, rows in enumerate(group.rows.tolist()):
                client = self.alone
                if client is None:
                    client = max(k for k, start in enumerate(STARTS) if rows[0] >= start)
                    rows = [r - STARTS[client] for r in rows]
                part = slice(i * group.size, (i + 1) * group.size)
                offsets = [] if group.offsets is None else group.offsets[:, part].tolist()
                flips = [] if group.flips is None else group.flips[part].tolist()
                self.steps[client].append((rows, offsets, flips))
            return _SAMPLES(group, x, y, spec)

        monkeypatch.setattr(StepGroup, "samples", record)


def _sequential(settings: LocalSettings, caps: list[int | None], recorder: _Recorder) -> None:
    x, y = _data()
    for k, (start, n) in enumerate(zip(STARTS, SIZES)):
        recorder.alone = k
        model = _model()
        ctx = ClientContext(model, k, 1, x[start : start + n], y[start : start + n], settings.lr)
        generator = torch.Generator().manual_seed(SEEDS[k])
        train_local(model, _fedavg(), LocalData(ctx.x, ctx.y, 10), settings, generator, ctx, caps[k])


def _batched(settings: LocalSettings, caps: list[int | None], clients: int) -> None:
    x, y = _data()
    end = STARTS[clients - 1] + SIZES[clients - 1]
    models = [_model() for _ in range(clients)]
    contexts = [
        ClientContext(m, k, 1, x[s : s + n], y[s : s + n], settings.lr)
        for k, (m, s, n) in enumerate(zip(models, STARTS, SIZES))
    ]
    generators = [torch.Generator().manual_seed(seed) for seed in SEEDS[:clients]]
    methods = [_fedavg() for _ in models]
    data = LocalData(x[:end], y[:end], 10)
    train_local_batched(models, methods, data, settings, generators, contexts, caps[:clients])


@pytest.mark.parametrize(
    ("settings", "caps"),
    [(SETTINGS, [None, None, None]), (AUGMENTED, [None, None, None]), (AUGMENTED, [5, 1, None])],
    ids=["plain", "augmented", "step budgets"],
)
def test_both_loops_train_on_the_same_plan_from_the_same_seeds(monkeypatch, settings, caps):
    sequential = _Recorder(monkeypatch)
    _sequential(settings, caps, sequential)
    expected = [6, 4, 6] if caps[0] is None else [5, 1, 6]  # two passes each, or the budget (mid-pass)
    assert [len(sequential.steps[k]) for k in range(3)] == expected
    # the first step: the first batch of the client's first random order, drawn on its own generator
    for k, n in enumerate(SIZES):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(SEEDS[k]))
        assert sequential.steps[k][0][0] == order[: SETTINGS.batch_size].tolist()
    for clients in (1, 2, 3):
        batched = _Recorder(monkeypatch)
        _batched(settings, caps, clients)
        for k in range(clients):
            assert batched.steps[k] == sequential.steps[k], (clients, k)


def test_a_step_budget_reshuffles_each_pass_and_stops_mid_pass():
    settings = LocalSettings(epochs=1, batch_size=4, lr=0.1, momentum=0.0, weight_decay=0.0)
    plan = phase_plan(_fedavg(), Phase(), settings, max_steps=5)
    steps = plan.steps(10, settings, torch.Generator().manual_seed(3))
    generator = torch.Generator().manual_seed(3)
    first, second = torch.randperm(10, generator=generator), torch.randperm(10, generator=generator)
    assert [s.index.tolist() for s in steps] == [
        first[0:4].tolist(), first[4:8].tolist(), first[8:10].tolist(), second[0:4].tolist(), second[4:8].tolist()
    ]  # fmt: skip
    assert [s.first for s in steps] == [True, False, False, True, False]
    assert pass_batches(10, settings, 2) == [(0, 4), (4, 4)]


def test_an_augmented_pass_draws_its_order_then_its_numbers_batch_by_batch():
    settings = dataclasses.replace(AUGMENTED, epochs=2)
    steps = phase_plan(_fedavg(), Phase(), settings, None).steps(7, settings, torch.Generator().manual_seed(4))
    assert len(steps) == 4  # two passes of batches 4 and 3
    generator = torch.Generator().manual_seed(4)
    for first in (0, 2):
        order = torch.randperm(7, generator=generator)
        for (start, size), step in zip(((0, 4), (4, 3)), steps[first : first + 2]):
            offsets = torch.randint(0, 5, (2, size), generator=generator)  # crop_padding 2: offsets 0..4
            flips = torch.rand(size, generator=generator) < 0.5
            assert step.index.tolist() == order[start : start + size].tolist()
            assert torch.equal(step.offsets, offsets) and torch.equal(step.flips, flips)


def test_a_phase_plan_takes_the_phase_s_rate_and_epochs_and_only_then_the_budget():
    method = build_method("univarfl", {}, MethodContext(10))
    assert method.terms
    whole = phase_plan(method, Phase(), SETTINGS, max_steps=3)
    assert (whole.lr, whole.epochs, whole.budget, whole.terms, whole.width) == (
        SETTINGS.lr, SETTINGS.epochs, 3, method.terms, 2 + len(method.terms)
    )  # fmt: skip
    own = phase_plan(method, Phase(epochs=1, lr=0.5, terms=False), SETTINGS, max_steps=3)
    assert (own.lr, own.epochs, own.budget, own.terms, own.width) == (0.5, 1, None, (), 2)


class _Term(LocalTerm):
    name = "t"

    def loss(self, batch: Batch) -> torch.Tensor:
        return batch.logits.sum() * float("nan")


def _with_term(method: Method, term: LocalTerm) -> Method:
    return dataclasses.replace(method, terms=(term,))


def _context(client_id: int, steps: int) -> ClientContext:
    x = torch.zeros(1, 1, 8, 8)
    return ClientContext(_model(), client_id, 1, x, torch.zeros(1, dtype=torch.long), 0.1, steps=steps)


def test_loss_totals_average_each_name_over_the_steps_it_was_on():
    method = _with_term(_fedavg(), _Term(0.5))
    totals = LossTotals(method, 1, torch.device("cpu"))
    assert totals.names == [LOCAL_LOSS, LOCAL_CE, TERM_PREFIX + "t"]
    totals.add((0,), torch.tensor([[1.0, 10.0, 4.0]]))
    totals.add((0,), torch.tensor([[2.0, 20.0]]))  # a phase without the term
    totals.add((0,), torch.tensor([[3.0, 30.0, 8.0]]))
    [result] = totals.results([_context(0, 3)], [method])
    assert result.steps == 3
    assert result.metrics == {LOCAL_LOSS: 2.0, LOCAL_CE: 20.0, TERM_PREFIX + "t": 6.0}


def test_loss_totals_add_stacked_steps_to_their_clients_rows():
    totals = LossTotals(_fedavg(), 3, torch.device("cpu"))
    totals.add([2, 0], torch.tensor([[1.0, 2.0], [3.0, 4.0]]), rows=torch.tensor([2, 0]))
    totals.add([2], torch.tensor([[5.0, 6.0]]), rows=torch.tensor([2]))
    means = totals.means()
    assert means == [
        {LOCAL_LOSS: 3.0, LOCAL_CE: 4.0},
        {LOCAL_LOSS: 0.0, LOCAL_CE: 0.0},
        {LOCAL_LOSS: 3.0, LOCAL_CE: 4.0},
    ]
    assert totals.counts == [[1, 1], [0, 0], [2, 2]]


def test_a_nan_loss_raises_and_the_stacked_loop_names_the_client():
    method = _fedavg()
    totals = LossTotals(method, 2, torch.device("cpu"))
    totals.add([0, 1], torch.tensor([[1.0, 1.0], [float("nan"), 1.0]]), rows=torch.tensor([0, 1]))
    with pytest.raises(NonFiniteLossError, match=r"^non-finite local loss \(client 8\): "):
        totals.results([_context(7, 1), _context(8, 1)], [method, _fedavg()], name_clients=True)
    single = LossTotals(method, 1, torch.device("cpu"))
    single.add((0,), torch.tensor([[float("inf"), 1.0]]))
    with pytest.raises(NonFiniteLossError, match=r"^non-finite local loss: "):
        single.results([_context(7, 1)], [method])


def test_a_nan_term_stops_both_loops():
    x, y = _data()
    settings = LocalSettings(epochs=1, batch_size=4, lr=0.1, momentum=0.0, weight_decay=0.0)
    models = [_model(), _model()]
    contexts = [
        ClientContext(m, 5 + k, 1, x[4 * k : 4 * k + 4], y[4 * k : 4 * k + 4], 0.1) for k, m in enumerate(models)
    ]
    methods = [_with_term(_fedavg(), _Term(1.0)) for _ in models]
    generators = [torch.Generator().manual_seed(k) for k in range(2)]
    with pytest.raises(NonFiniteLossError, match=r"\(client 5\).*" + TERM_PREFIX + "t"):
        train_local_batched(models, methods, LocalData(x[:8], y[:8], 10), settings, generators, contexts, [None, None])
    with pytest.raises(NonFiniteLossError, match=r"^non-finite local loss: "):
        train_local(_model(), methods[0], LocalData(x[:4], y[:4], 10), settings, torch.Generator().manual_seed(0))
