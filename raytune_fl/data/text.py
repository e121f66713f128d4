"""Text as arrays: strings encoded as token ids over a fixed vocabulary (LEAF Shakespeare's 80 characters), and the
text datasets' array contract.

A text dataset is an ArrayDataset whose `vocab` is non-empty: x (N, L) int64 token ids in 0..V-1, y (N,) int64,
num_classes = V for a next-token task. A character outside the vocabulary is refused, naming it (LEAF's own code
maps it to -1, which an embedding would read as its last row): the data and the vocabulary disagree, and a silent
id would train on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# LEAF's ALL_LETTERS (leaf/models/utils/language_utils.py): the 80 characters of its Shakespeare task, id = position
LEAF_CHARACTERS: tuple[str, ...] = tuple(
    "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
)
assert len(LEAF_CHARACTERS) == 80 and len(set(LEAF_CHARACTERS)) == 80


def encode(texts: Sequence[str], vocab: Sequence[str], where: str) -> np.ndarray:
    """Strings of one length L, character by character, as (N, L) int64 ids into `vocab`; a string of another
    length or a character outside `vocab` is refused, the message starting with `where`."""
    ids = {token: i for i, token in enumerate(vocab)}
    lengths = sorted({len(text) for text in texts})
    if len(lengths) > 1:
        raise ValueError(f"{where}: the strings differ in length ({', '.join(map(str, lengths[:5]))}); one length L")
    out = np.zeros((len(texts), lengths[0] if lengths else 0), dtype=np.int64)
    for row, text in enumerate(texts):
        try:
            out[row] = [ids[c] for c in text]
        except KeyError as error:
            raise ValueError(
                f"{where}: sample {row} holds {error.args[0]!r}, not one of the vocabulary's {len(vocab)} characters"
            ) from None
        except TypeError:
            raise ValueError(f"{where}: sample {row} is a {type(text).__name__}, not a string") from None
    return out


def encode_labels(labels: Sequence[str], vocab: Sequence[str], where: str) -> np.ndarray:
    """One-character labels (the next character) as (N,) int64 ids into `vocab`."""
    wrong = next((i for i, label in enumerate(labels) if not isinstance(label, str) or len(label) != 1), None)
    if wrong is not None:
        raise ValueError(f"{where}: label {wrong} is {labels[wrong]!r}, not one character (the next character)")
    return encode(labels, vocab, where)[:, 0] if len(labels) else np.zeros(0, dtype=np.int64)


def check_text(
    source: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    vocab: Sequence[str],
) -> None:
    """The text contract, errors starting with `source`: x (N, L) integer ids in 0..V-1 (V = len(vocab)), the
    same L in both splits, labels (N,) integers in 0..V-1, at least two distinct labels. Unlike images' classes
    (check_classes), a token never seen as a training label is allowed: the vocabulary fixes K, and a character
    that never comes next is an output that is never the answer, not a gap in the classes' numbering."""
    size = len(vocab)
    for key, x, y in (("x_train", x_train, y_train), ("x_test", x_test, y_test)):
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"{source}: {key} must be (N, L) integer token ids, got {x.dtype} {x.shape}")
        if len(x) == 0:
            raise ValueError(f"{source}: {key} is empty")
        if x.min() < 0 or x.max() >= size:
            raise ValueError(f"{source}: {key} holds ids {x.min()}..{x.max()}; the vocabulary's are 0..{size - 1}")
        label = "y" + key[1:]
        if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"{source}: {label} must be ({len(x)},) integer labels, got {y.dtype} {y.shape}")
        if y.min() < 0 or y.max() >= size:
            raise ValueError(f"{source}: {label} holds labels {y.min()}..{y.max()}; with {size} tokens 0..{size - 1}")
    if x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"{source}: x_train sequences hold {x_train.shape[1]} tokens but x_test's {x_test.shape[1]}")
    if len(np.unique(np.concatenate([y_train, y_test]))) < 2:
        raise ValueError(f"{source}: every label is {vocab[int(y_train[0])]!r}: one class, nothing to learn")
