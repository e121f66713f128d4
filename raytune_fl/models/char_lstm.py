"""`char_lstm`: LEAF's and FedAvg's Shakespeare model: an 8-dimensional character embedding, a 2-layer LSTM of 256
units, and a linear classifier over the vocabulary that reads the last step's hidden state (z).

Built for a text dataset: the factory's `in_channels` is the vocabulary's size and `image_size` (1, L) (the
registry's contract for text, ArrayDataset.model_inputs); a batch is (n, L) int64 token ids. z, the top layer's
hidden state after the last character, is the pooled representation FedUV's, UniVarFL's, MOON's and FedLD's terms
and the spectrum diagnostic read, as the image models' projector output is.
"""

from __future__ import annotations

from torch import Tensor, nn

from raytune_fl.models.registry import MODELS

EMBEDDING, HIDDEN, LAYERS = 8, 256, 2  # LEAF's Shakespeare model (McMahan et al. 2017's character LSTM)


class CharLSTM(nn.Module):
    def __init__(self, vocab_size: int, num_classes: int, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, EMBEDDING)
        self.lstm = nn.LSTM(EMBEDDING, hidden, num_layers=LAYERS, batch_first=True)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        out, _ = self.lstm(self.embedding(x))  # (n, L, hidden): the top layer's state at every step
        z = out[:, -1]
        return self.classifier(z), z


@MODELS.register("char_lstm")
def char_lstm(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> CharLSTM:
    """`in_channels` is the vocabulary's size for a text dataset (image_size (1, L): any L runs)."""
    return CharLSTM(in_channels, num_classes)
