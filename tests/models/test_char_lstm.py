"""`char_lstm` (raytune_fl/models/char_lstm.py): LEAF's Shakespeare model's layers and sizes, its (logits, z) on
token ids, z the top layer's state after the last character, and a plugin text model checked on token ids."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from raytune_fl.models import build_model
from raytune_fl.models.char_lstm import EMBEDDING, HIDDEN, CharLSTM
from raytune_fl.models.registry import check_model, sample_batch


def test_char_lstm_is_leafs_embedding_8_and_two_lstm_layers_of_256():
    model = build_model("char_lstm", 80, 80, (1, 80), text=True)
    assert isinstance(model, CharLSTM) and (EMBEDDING, HIDDEN) == (8, 256)
    assert model.embedding.weight.shape == (80, 8) and model.lstm.num_layers == 2 and model.lstm.hidden_size == 256
    assert model.classifier.in_features == 256 and model.classifier.out_features == 80
    # embedding 640 + LSTM layer 1: 4*256*(8+256+2) = 272,384 + layer 2: 4*256*(256+256+2) = 526,336 + head 20,560
    assert sum(p.numel() for p in model.parameters()) == 640 + 272_384 + 526_336 + 20_560


def test_its_z_is_the_top_layers_hidden_state_after_the_last_character_and_the_logits_read_it():
    torch.manual_seed(0)
    model = build_model("char_lstm", 10, 4, (1, 6)).eval()
    x = torch.randint(0, 10, (3, 6))
    logits, z = model(x)
    assert logits.shape == (3, 4) and z.shape == (3, 256)
    _, (h, _) = model.lstm(model.embedding(x))
    assert torch.allclose(z, h[-1]) and torch.allclose(logits, model.classifier(z))


def test_a_plugin_text_model_is_checked_on_a_batch_of_token_ids():
    assert sample_batch(80, (1, 7), text=True) == (2, 7) and sample_batch(3, (4, 5)) == (2, 3, 4, 5)

    class Bag(nn.Module):  # reads ids through an embedding: float images would fail it
        def __init__(self) -> None:
            super().__init__()
            self.embedding, self.classifier = nn.Embedding(5, 3), nn.Linear(3, 2)

        def forward(self, x):
            z = self.embedding(x).mean(1)
            return self.classifier(z), z

    check_model("bag", Bag(), 5, 2, (1, 7), text=True)
    with pytest.raises(ValueError, match=r"^model 'bag': forward failed on a \(2, 5, 1, 7\) batch: "):
        check_model("bag", Bag(), 5, 2, (1, 7))
