"""``dataset: synthetic``: seeded Gaussian images for throughput work, any shape, nothing to download.

Each class has a mean image: a coloured grating, a colour times a plane wave of one spatial frequency, the lowest
frequencies first (a plain colour, then one cycle per image, ...; see _class_means), which convolutions and global
pooling pick up. A sample is its class's mean plus unit Gaussian noise per pixel. The means are orthogonal and each
has norm ``SEPARATION`` (in noise standard deviations), so every pair of classes is equally far apart and the best
possible (Bayes) accuracy is known: the nearest class mean wins, with probability
``integral phi(t) Phi(t + SEPARATION) ** (classes - 1) dt``.

The settings live in the experiment's ``synthetic`` section (config.SyntheticConfig): shape, classes, samples,
test_samples, seed. The arrays depend on those settings only, never on the experiment's training seed: the data is a
setting, like the partition, so runs with different training seeds train on the same images. The test split is
drawn from its own stream, so it stays the same when only ``samples`` changes (with ``test_samples`` set).
Builds are cached per settings (one set at a time per process); the cached arrays are shared, so copy before
editing in place. Importing this module registers ``synthetic`` in ``DATASETS``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from statistics import NormalDist

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from raytune_fl.data.datasets import ArrayDataset, register_builtin

# Norm of every class mean, in noise standard deviations; the means are orthogonal, so two classes are
# SEPARATION * sqrt(2) = 4.9 apart. Bayes accuracy: 96 % with 10 classes (82 % with 100, 99.3 % with 2). Neither
# trivial (a perfect model still misses one sample in 23, so accuracy curves keep headroom and methods can differ)
# nor hopeless: the nearest class mean estimated from 400 samples per class gets 93 % at 3x16x16. CPU checks at
# 3x16x16 (SGD 0.01, momentum 0.9, batch 64, IID): FedAvg of simple_cnn on 20,000 samples over 10 clients reaches
# 10/36/47 % test accuracy in rounds 1-3 (10/15/26 % with the smooth random means and SEPARATION 3 used before, 37 %
# in round 3 with these means at 3), resnet18 trained centrally on 2,000 samples 44 % after two epochs and 84 %
# after four. Few rounds need enough local steps, though: on 2,000 samples over 4 clients (7 steps a round) none of
# the means tried, not even 3 classes of plain colour, left chance within 4 rounds. The signal per pixel is
# SEPARATION / sqrt(C*H*W) (0.11 at 3x16x16): invisible in one pixel, found by pooling over the image.
SEPARATION = 3.5
_LEVELS = 1 << 16  # noise: a uint16 draw looked up in a table of Gaussian quantiles (see _normal_table)
_CHUNK = 1 << 18  # values drawn per step: 1.5 MiB of temporaries (cache-sized: fastest), whatever the size


class SyntheticConfig(BaseModel):
    """`dataset: synthetic` (data/synthetic.py): seeded Gaussian images around one coloured grating per class;
    built in memory, nothing downloaded. Other datasets ignore this section. An experiment's `synthetic` section.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # as config's sections

    shape: tuple[int, ...] = Field((3, 32, 32), description="[channels, height, width] of one image: CIFAR-10's")
    classes: int = Field(10, ge=2, description="number of classes, one coloured grating each")
    samples: int = Field(
        20_000, ge=1, description="training samples, shared by the clients (the GPU throughput benchmark's count)"
    )
    test_samples: int | None = Field(
        None, ge=1, description="test samples; unset = a fifth of samples (CIFAR-10's ratio), at least 1 per class"
    )
    # a setting like partition.seed: the experiment's seed never changes the images
    seed: int = Field(0, ge=0, description="seed of the images themselves (base.seed never changes them)")

    @field_validator("shape")
    @classmethod
    def _image_shape(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if len(value) != 3 or min(value) < 1:
            raise ValueError(
                f"expected [channels, height, width], each at least 1, e.g. [3, 32, 32] (got {list(value)})"
            )
        return value

    @model_validator(mode="after")
    def _room_for_classes(self) -> SyntheticConfig:
        values = math.prod(self.shape)  # the class means are orthogonal: at most one per pixel value
        if self.classes > values:
            raise ValueError(f"classes: at most {values} (C*H*W of shape {list(self.shape)}); got {self.classes}")
        if self.samples < self.classes:
            raise ValueError(f"samples: at least one per class ({self.classes} classes); got {self.samples}")
        return self


def bayes_accuracy(classes: int, separation: float = SEPARATION) -> float:
    """The best accuracy any classifier can reach on this data: classes orthogonal means of norm `separation`."""
    normal = NormalDist()
    # integral over t of phi(t) * Phi(t + separation) ** (classes - 1): a midpoint rule on [-8, 8] is exact to 1e-6
    ts = np.linspace(-8.0, 8.0, 4001)
    cdf = np.array([normal.cdf(t + separation) for t in ts])
    pdf = np.exp(-0.5 * ts**2) / math.sqrt(2 * math.pi)
    return float(np.sum(pdf * cdf ** (classes - 1)) * (ts[1] - ts[0]))


def _options_error(error: ValidationError) -> ValueError:
    """pydantic's error on the settings as one ValueError that names each field: synthetic.<field>: <problem>."""
    problems = []
    for item in error.errors():
        loc = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")  # a model validator's message starts with its field
        problems.append(f"synthetic.{loc}: {message}" if loc else f"synthetic.{message}")
    return ValueError("; ".join(problems))


def synthetic(root: str | None = None, options: object = None) -> ArrayDataset:
    """The synthetic dataset for `options`: a config.SyntheticConfig (an experiment's `synthetic` section) or a
    mapping of its fields; unset fields take its defaults (3x32x32, 10 classes, 20,000 training samples)."""
    if not isinstance(options, SyntheticConfig):
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"synthetic: options must be a SyntheticConfig or a mapping, not {type(options).__name__}")
        try:
            options = SyntheticConfig.model_validate(dict(options or {}))
        except ValidationError as error:
            raise _options_error(error) from None
    test = options.test_samples or max(options.classes, options.samples // 5)  # CIFAR-10's 10,000 to 50,000
    return _build(tuple(options.shape), options.classes, options.samples, test, options.seed)


register_builtin("synthetic", synthetic)


@functools.lru_cache(maxsize=1)
def _build(shape: tuple[int, ...], classes: int, samples: int, test: int, seed: int) -> ArrayDataset:
    means_seed, train_seed, test_seed = _streams(shape, classes, seed)
    means = _class_means(shape, classes, np.random.default_rng(means_seed))
    x_train, y_train = _draw(means, samples, train_seed)
    x_test, y_test = _draw(means, test, test_seed)
    return ArrayDataset("synthetic", x_train, y_train, x_test, y_test, num_classes=classes)


def _streams(shape: tuple[int, ...], classes: int, seed: int) -> list[np.random.SeedSequence]:
    """The seeds of the class means, the training split and the test split. The task (the means) depends on seed,
    classes and shape only; each split draws from its own stream."""
    return np.random.SeedSequence([seed, classes, *shape]).spawn(3)


def class_means(shape: tuple[int, ...] = (3, 32, 32), classes: int = 10, seed: int = 0) -> np.ndarray:
    """The class means the synthetic dataset with these settings draws its images around (the Bayes classifier's)."""
    return _class_means(tuple(shape), classes, np.random.default_rng(_streams(tuple(shape), classes, seed)[0]))


def _class_means(shape: tuple[int, ...], classes: int, rng: np.random.Generator) -> np.ndarray:
    """(classes, C, H, W) float32: pairwise orthogonal coloured gratings, each of norm SEPARATION.

    Class k is colour_k (a unit vector over the channels) times cos(2 pi (fy y / H + fx x / W) + phase): a plane
    wave at an integer frequency (fy, fx) of the H x W grid. Two such images are exactly orthogonal when their
    frequencies differ (other than f and -f, the same wave), when their colours are orthogonal, or when they are
    the cosine and the sine of one frequency; so every class gets a different (frequency, colour, cosine/sine) and
    there is room for all C*H*W classes the settings allow.

    Which ones, and why a CNN learns them: the classes take the lowest frequencies first (in cycles per pixel; the
    zero frequency, a plain colour, is the lowest), every colour of a frequency (an orthonormal colour basis, one
    per frequency) before the next one, and the sines (the cosines moved by a quarter period) only when the
    cosines run out. A network that ends in global average pooling, nearly blind to where things are, sees a plain
    colour linearly (its pooled first-layer features move with it) and a wave of one cycle per image as a large
    colour gradient; a fine texture (a few pixels per cycle) it has to learn to detect by its energy, quadratic in
    the faint signal, which is slow: gratings of 2.7 to 8 pixels per cycle took simple_cnn longer than the smooth
    random means used before (resnet18 about as long), these less time for both (the CPU checks at SEPARATION).
    The noise keeps the task from being trivial: the Bayes accuracy is the closed form's, however a network looks
    at the images.
    """
    channels, height, width = shape
    pairs, conjugate = _frequency_pairs(height, width, rng)
    cosines = channels * len(pairs)  # the first slots; then the sines of the frequencies that have one
    slot = np.arange(classes)
    sine = slot >= cosines
    pair, colour = np.divmod(np.where(sine, slot - cosines, slot), channels)
    pair[sine] = np.flatnonzero(~conjugate)[pair[sine]]  # a frequency that is its own negative has no sine
    used = int(pair.max()) + 1  # colours and phases for the frequencies the classes take, in their order
    basis, upper = np.linalg.qr(rng.standard_normal((used, channels, channels)))
    basis *= np.sign(np.diagonal(upper, axis1=1, axis2=2))[:, None, :]  # the one QR whose R has a positive diagonal
    phases = np.where(conjugate[:used], 0.0, rng.uniform(0.0, 2.0 * math.pi, used))
    fy, fx = pairs[pair].T
    turns = (fy[:, None] * np.arange(height) % height / height)[:, :, None] + (
        fx[:, None] * np.arange(width) % width / width
    )[:, None, :]  # in whole turns, exact: integer products taken modulo the period
    waves = np.cos(2.0 * math.pi * turns + (phases[pair] - 0.5 * math.pi * sine)[:, None, None])
    means = basis[pair, :, colour][:, :, None, None] * waves[:, None]
    means *= SEPARATION / np.sqrt(np.einsum("kchw,kchw->k", means, means))[:, None, None, None]
    # rounded to a 2**-20 grid: last-bit differences of cos and QR between machines (a trial on another node
    # builds its own copy) then cannot change a single float32 of the data
    return (np.round(means * 2.0**20) / 2.0**20).astype(np.float32)


def _frequency_pairs(height: int, width: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The frequencies (fy, fx) of the H x W grid, one of each pair f, -f (the same wave), lowest first (in cycles
    per pixel, random among equals: (0, 1) or (1, 0) first, say), and whether each is its own negative (fy and fx
    each 0 or half the grid: a cosine only, its sine is zero on the grid)."""
    fy, fx = (grid.ravel() for grid in np.meshgrid(np.arange(height), np.arange(width), indexing="ij"))
    index, negative = np.arange(height * width), (-fy % height) * width + (-fx % width)
    keep = index <= negative  # one of each pair
    fy, fx, conjugate = fy[keep], fx[keep], (index == negative)[keep]
    cycles = np.hypot(np.minimum(fy, height - fy) / height, np.minimum(fx, width - fx) / width)
    # rounded: frequencies of one length compare equal on every machine, so the seed alone orders them
    order = np.lexsort((rng.permutation(len(cycles)), np.round(cycles, 9)))
    return np.stack([fy, fx], axis=1)[order], conjugate[order]


def _draw(means: np.ndarray, n: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    """n samples: balanced labels in random order, each image its class's mean plus unit Gaussian noise."""
    classes = len(means)
    rows = max(1, _CHUNK // means[0].size)  # samples per chunk
    labels_seed, *chunk_seeds = seed.spawn(1 + -(-n // rows))
    labels = np.random.default_rng(labels_seed).permutation(np.arange(n, dtype=np.int64) % classes)
    x = np.empty((n, *means.shape[1:]), dtype=np.float32)
    flat, flat_means, table = x.reshape(n, -1), means.reshape(classes, -1), _normal_table()

    def fill(chunk: int) -> None:  # numpy's draw and lookup release the GIL: chunks fill in parallel
        block, picked = flat[chunk * rows : (chunk + 1) * rows], labels[chunk * rows : (chunk + 1) * rows]
        rng = np.random.default_rng(chunk_seeds[chunk])
        block[...] = table[rng.integers(0, _LEVELS, block.shape, dtype=np.uint16)]
        block += flat_means[picked]

    # each chunk has its own stream, so the values do not depend on how many threads fill them
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(fill, range(len(chunk_seeds))))
    return x, labels


@functools.cache
def _normal_table() -> np.ndarray:
    """The standard normal's quantiles at the midpoints of 65,536 equal-probability bins, float32.

    A uint16 draw looked up here is Gaussian noise quantised to 65,536 levels (|z| <= 4.3, variance 0.99999):
    about 4x faster than numpy's float32 Gaussian draw (20,000 x 3x32x32 in ~0.3 s on one laptop core, 1.2 s
    with standard_normal), which is what makes the dataset cheap to rebuild in every trial process."""
    normal = NormalDist()
    return np.array([normal.inv_cdf((i + 0.5) / _LEVELS) for i in range(_LEVELS)], dtype=np.float32)
