"""Feature shift in the engine: the embedded rotated-MNIST space's clients are its domains; augmentation is off
by default and changes training when on. (The space through tune.py: tests/system/test_feature_shift.py.)"""

from __future__ import annotations

import torch

from raytune_fl.config import load_space, override
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import Federation
from tests.support import REPO

SPACE = REPO / "search_spaces" / "rotated.yaml"


def test_clients_are_domains():
    data = prepare_data(load_space(SPACE).base)
    domains = data.dataset.domains_train
    assert data.num_clients == len(data.dataset.domain_names) == 6
    for client, part in enumerate(data.client_parts):
        assert set(domains[part].tolist()) == {client}  # one rotation per client, all of it
    assert sum(len(p) for p in data.client_parts) == len(domains)


def test_augmentation_changes_training_and_off_is_the_default():
    space = override(load_space(SPACE), {"base.rounds": 1, "base.partition.clients": 6})
    base = space.base.model_copy(update={"resources": space.base.resources.model_copy(update={"actors": 0})})
    torch.set_num_threads(1)
    plain, augmented = [], []
    Federation(base, "fedavg", {}).run(plain.append)
    flipped = base.model_copy(update={"augment": base.augment.model_copy(update={"crop_padding": 2})})
    Federation(flipped, "fedavg", {}).run(augmented.append)
    assert plain[0]["train_loss"] != augmented[0]["train_loss"]
