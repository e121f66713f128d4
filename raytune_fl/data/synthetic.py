"""``dataset: synthetic``: seeded Gaussian images for throughput work, any shape, nothing to download.

Each class has a mean image: a smooth (low-frequency) pattern, bilinearly upsampled from a coarse random grid, so
that convolutions and pooling see it. A sample is its class's mean plus unit Gaussian noise per pixel. The means are
orthogonal and each has norm ``SEPARATION`` (in noise standard deviations), so every pair of classes is equally far
apart and the best possible (Bayes) accuracy is known: the nearest class mean wins, with probability
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

from raytune_fl.data.datasets import DATASETS, ArrayDataset

# Norm of every class mean, in noise standard deviations; the means are orthogonal, so two classes are
# SEPARATION * sqrt(2) = 4.2 apart. Bayes accuracy: 90 % with 10 classes (68 % with 100, 98 % with 2). Neither
# trivial (a perfect model still misses about one sample in ten, so accuracy curves keep headroom and methods can
# differ) nor hopeless: the nearest class mean estimated from 600 samples per class gets 80 % at 3x32x32, and
# simple_cnn trained on those 6,000 samples (SGD 0.01, batch 64, CPU check) reaches 41 % test accuracy after one
# epoch and 57 % after three, where chance is 10 %. The signal per pixel is SEPARATION / sqrt(C*H*W) (0.054 at
# 3x32x32): invisible in one pixel, found by pooling over the smooth pattern, which is what convolutions do.
SEPARATION = 3.0
_COARSE = 4  # side of the random grid a mean is upsampled from (more where the classes need more dimensions)
_LEVELS = 1 << 16  # noise: a uint16 draw looked up in a table of Gaussian quantiles (see _normal_table)
_CHUNK = 1 << 18  # values drawn per step: 1.5 MiB of temporaries (cache-sized: fastest), whatever the size


class SyntheticConfig(BaseModel):
    """`dataset: synthetic` (data/synthetic.py): seeded Gaussian images around one smooth mean pattern per class;
    built in memory, nothing downloaded. Other datasets ignore this section. An experiment's `synthetic` section.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # as config.py's sections

    shape: tuple[int, ...] = (3, 32, 32)  # [channels, height, width] of one image: CIFAR-10's
    classes: int = Field(10, ge=2)
    samples: int = Field(20_000, ge=1)  # training samples (clients share them): the GPU throughput benchmark's
    test_samples: int | None = Field(None, ge=1)  # unset = a fifth of samples (CIFAR-10's ratio), >= 1 per class
    seed: int = Field(
        0, ge=0
    )  # the data is a setting like partition.seed: the experiment's seed never changes the images

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


@DATASETS.register("synthetic")
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
    """(classes, C, H, W) float32: smooth, pairwise orthogonal patterns, each of norm SEPARATION."""
    channels, height, width = shape
    side = max(_COARSE, math.ceil(math.sqrt(classes / channels)))  # enough coarse values for orthogonal patterns
    grid_h, grid_w = min(height, side), min(width, side)
    if channels * grid_h * grid_w < classes:  # a thin image: patterns at full resolution (config: classes <= C*H*W)
        grid_h, grid_w = height, width
    up_h, up_w = _upsampling(height, grid_h), _upsampling(width, grid_w)
    coarse = rng.standard_normal((classes, channels, grid_h, grid_w))
    # orthonormalise in pixel space without building the patterns twice: the Gram matrix of the upsampled
    # patterns from the coarse ones, then Gram-Schmidt (Cholesky) on the coarse values (upsampling is linear)
    gram = np.einsum("kcij,lcab,ia,jb->kl", coarse, coarse, up_h.T @ up_h, up_w.T @ up_w, optimize=True)
    lower = np.linalg.cholesky(gram)
    coarse = np.linalg.solve(lower, coarse.reshape(classes, -1)).reshape(coarse.shape)
    means = SEPARATION * np.einsum("kcij,hi,wj->kchw", coarse, up_h, up_w, optimize=True)
    # rounded to a 2**-20 grid: last-bit differences of linear algebra between machines (a trial on another node
    # builds its own copy) then cannot change a single float32 of the data
    return (np.round(means * 2.0**20) / 2.0**20).astype(np.float32)


def _upsampling(size: int, grid: int) -> np.ndarray:
    """(size, grid): bilinear interpolation from `grid` evenly spaced points to `size` (corners aligned)."""
    if grid == size:
        return np.eye(size)
    positions = np.linspace(0.0, grid - 1.0, size)
    return np.stack([np.interp(positions, np.arange(grid), np.eye(grid)[j]) for j in range(grid)], axis=1)


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
