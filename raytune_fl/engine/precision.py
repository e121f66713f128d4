"""Mixed precision (`precision: fp32 | bf16 | fp16`): every decision about it, in one module.

Only the model's forward pass runs in autocast; its outputs are cast back to float32 right after it, so the
cross-entropy and every method's loss term (variances, covariances, singular values, proximal pulls) are float32
without a method knowing. Parameters, gradients, momentum, the weights a client returns, the aggregation and the
server's state stay float32. fp16 scales the loss (torch's GradScaler): gradients are unscaled before anything reads
them and a step whose gradients overflowed is skipped. fp32 never enters an autocast context: its path is the
plain one, bit for bit (tests/engine/test_precision.py).

The device check runs where the device is known (the trial's process when it builds its evaluator, a worker when
it first trains), never in the config: the driver may lack a capability the workers have.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from raytune_fl.devices import BF16_CPUS, BF16_INSTEAD, DeviceError

Precision = Literal["fp32", "bf16", "fp16"]
_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class PrecisionError(DeviceError):
    """The device cannot compute at the configured precision; the first line names the field."""


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of `precision`; None for fp32 (no autocast at all)."""
    if precision not in _DTYPES:
        raise ValueError(f"precision: {precision!r} is none of {', '.join(_DTYPES)}")
    return _DTYPES[precision]


@functools.cache
def _bf16_capable(device_type: str, index: int | None) -> bool:
    try:
        if device_type == "cpu":  # oneDNN's bf16 kernels: AVX-512 BF16 / AMX (or AVX-512 core, emulated)
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        if device_type == "cuda":
            with torch.cuda.device(index if index is not None else torch.cuda.current_device()):
                return bool(torch.cuda.is_bf16_supported(including_emulation=False))  # emulated: no gain
    except (RuntimeError, AttributeError, AssertionError):  # a build without the query or the device
        return False
    return True  # another backend: torch.autocast itself refuses what it cannot run


def supports_bf16(device: torch.device) -> bool:
    """Whether `device` runs bfloat16 kernels (asked once per device)."""
    return _bf16_capable(device.type, device.index)


def check_precision(precision: str, device: torch.device | str, bf16_supported: bool | None = None) -> None:
    """Refuse a precision `device` cannot run (a PrecisionError whose first line names the field).

    `bf16_supported`: the capability as given, instead of asking the device (tests)."""
    device = torch.device(device)
    if autocast_dtype(precision) != torch.bfloat16:
        return  # fp16 autocast exists on the CPU and every CUDA device; fp32 needs nothing
    supported = supports_bf16(device) if bf16_supported is None else bf16_supported
    if not supported:
        what = f"this CPU (oneDNN's: {BF16_CPUS})" if device.type == "cpu" else f"{device} (compute < 8.0)"
        raise PrecisionError(
            f"precision: 'bf16' needs a device with bfloat16 support; {what} has none\n"
            f"{BF16_INSTEAD}, or train on a device with bf16 (CPUs with {BF16_CPUS}; NVIDIA GPUs from Ampere on)"
        )


def _to_float32(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(_to_float32(v) for v in value)
    return value


def mixed_forward(precision: str, device: torch.device, vmapped: bool = False) -> Callable[[nn.Module, Tensor], Any]:
    """`forward(model, x)`: the model called plainly under fp32; under bf16/fp16 in autocast on `device`'s type,
    its floating-point outputs (logits, features) cast to float32 right after. Checks the device first.

    `vmapped`: the forward runs inside torch.func.vmap (engine/batched.py), whose batching rules skip autocast for
    some ops (`_VmapAutocast`)."""
    dtype = autocast_dtype(precision)
    if dtype is None:
        return _plain_forward
    check_precision(precision, device)
    device_type = device.type

    def forward(model: nn.Module, x: Tensor) -> Any:
        with torch.autocast(device_type, dtype=dtype):
            if vmapped:
                with _VmapAutocast(dtype):
                    out = model(x)
            else:
                out = model(x)
        return _to_float32(out)

    return forward


def _plain_forward(model: nn.Module, x: Tensor) -> Any:
    return model(x)


def _functions(names: Sequence[str]) -> frozenset[Callable[..., Any]]:
    spaces = (torch, F, torch.linalg, Tensor)
    return frozenset(getattr(space, name) for space in spaces for name in names if hasattr(space, name))


# autocast's lower-precision ops (aten/src/ATen/autocast_mode.cpp, CPU's list; CUDA's holds them too). Under vmap,
# torch 2.14 on the CPU runs convolutions, conv_transpose, addmm, baddbmm, prelu, sdpa and vecdot in float32
# despite autocast (their batching rules call kernels autocast does not see); matmul, mm, bmm and linear it casts.
_LOWER_PRECISION = _functions(
    (
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv_tbc",
        "addmm", "addbmm", "baddbmm", "mm", "bmm", "matmul", "linear", "prelu", "scaled_dot_product_attention",
        "vecdot",
    )
)  # fmt: skip


# normalisations: outside vmap they take a low-precision input with float32 weights and statistics (a mixed-type
# kernel); under vmap their batching rule refuses the mix ("expected scalar type BFloat16 but found Float")
_NORMALISATIONS = _functions(("batch_norm", "instance_norm", "layer_norm", "group_norm"))


class _VmapAutocast(TorchFunctionMode):
    """Autocast's cast for the ops of `_LOWER_PRECISION`, done before they dispatch: every floating-point tensor
    argument but float64 to the autocast dtype, as autocast's own cast does. Where autocast does apply (outside
    vmap, or an op whose batching rule it sees), it then finds its inputs cast already: the same kernels, the same
    numbers as the sequential loop. A normalisation runs in float32 on its input cast up, its output cast back down
    (`_NORMALISATIONS`): where the mixed-type kernel of the sequential loop rounds, up to summation order."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def _cast(self, value: Any) -> Any:
        if isinstance(value, Tensor) and value.is_floating_point() and value.dtype != torch.float64:
            return value.to(self.dtype)
        return value

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _LOWER_PRECISION:
            args = tuple(self._cast(a) for a in args)
            kwargs = {key: self._cast(v) for key, v in kwargs.items()}
        elif func in _NORMALISATIONS and args and isinstance(args[0], Tensor) and args[0].dtype == self.dtype:
            # the mixed kernel's numbers: float32 inside, the output (and in backward the input's gradient)
            # rounded to the low precision
            return func(args[0].float(), *args[1:], **kwargs).to(self.dtype)
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------------------------- fp16 loss scaling


class UnscaledStep:
    """What GradScaler reads of an optimiser (`param_groups`, `step`) around engine/sgd.py's PlainSGD, which keeps
    torch.optim.Optimizer out of the process (sgd.py says why)."""

    def __init__(self, params: Sequence[Tensor], step: Callable[[], None]) -> None:
        self.param_groups = [{"params": list(params)}]
        self._step = step

    def step(self) -> None:
        self._step()


# GradScaler's default initial scale, 2**16, suits one scaler for a whole run: it halves on the first overflows and
# stays. A client's scaler lives one local round, so each round would pay them again: on simple_cnn (1x28x28, batch
# 64) 2**16 and 2**15 overflowed, skipping the first 2 of a round's steps. Scales 1 to 2**15 gave the same unscaled
# gradients on simple_cnn (8x8, 28x28, 32x32 inputs, batches 10-64: no underflow to save); 2**12 keeps 8x headroom
# below the smallest that overflowed, and still grows or backs off as GradScaler does.
FP16_INIT_SCALE = 2.0**12


class LossScaler:
    """fp16's dynamic loss scaling for one client's local round (torch.amp.GradScaler from FP16_INIT_SCALE): one
    scale per round, whichever worker trains the client, so a client's result does not depend on where it trained."""

    def __init__(self, device: torch.device) -> None:
        self.scaler = torch.amp.GradScaler(device.type, init_scale=FP16_INIT_SCALE)

    def scale(self, loss: Tensor) -> Tensor:
        return self.scaler.scale(loss)

    def unscale(self, params: Sequence[Tensor], step: Callable[[], None]) -> UnscaledStep:
        """Unscale the gradients of `params` in place (before hooks clip or correct them); returns what `step`
        takes."""
        stepper = UnscaledStep(params, step)
        self.scaler.unscale_(cast("torch.optim.Optimizer", stepper))  # all GradScaler reads of an optimiser
        return stepper

    def step(self, stepper: UnscaledStep) -> None:
        """The optimiser's step unless a gradient is inf/NaN (then skipped), and the scale's update."""
        self.scaler.step(cast("torch.optim.Optimizer", stepper))
        self.scaler.update()


def loss_scaler(precision: str, device: torch.device) -> LossScaler | None:
    """A LossScaler under fp16, else None (bf16 keeps float32's exponent range: no scaling)."""
    return LossScaler(device) if autocast_dtype(precision) == torch.float16 else None


class StackedLossScaler:
    """LossScaler for K stacked clients (engine/batched.py): one scale and growth tracker per client, updated as
    GradScaler updates its own, so each client skips exactly the steps it would skip training alone."""

    def __init__(self, clients: int, device: torch.device) -> None:
        reference = torch.amp.GradScaler(device.type, init_scale=FP16_INIT_SCALE)  # x2 / x0.5, 2000 steps
        self.growth, self.backoff = reference.get_growth_factor(), reference.get_backoff_factor()
        self.interval = reference.get_growth_interval()
        self.scale = torch.full((clients,), reference.get_scale(), dtype=torch.float32, device=device)
        self.tracker = torch.zeros(clients, dtype=torch.int32, device=device)

    def unscale(self, grads: Mapping[str, Tensor], scale: Tensor) -> Tensor:
        """Divide each row k of the stacked `grads` by `scale[k]` in place (as GradScaler: times the float32
        reciprocal); returns which rows hold an inf/NaN gradient, (K,) bool."""
        inverse = scale.double().reciprocal().float()
        found = torch.zeros_like(scale, dtype=torch.bool)
        for g in grads.values():
            found |= ~torch.isfinite(g.flatten(1)).all(dim=1)
            g.mul_(inverse.view(-1, *([1] * (g.dim() - 1))))
        return found

    def update(self, rows: Tensor, found: Tensor) -> None:
        """GradScaler.update for the clients `rows` (their steps' `found` inf): back off on inf, else grow after
        `interval` clean steps in a row."""
        scale, tracker = self.scale.index_select(0, rows), self.tracker.index_select(0, rows)
        tracker = torch.where(found, torch.zeros_like(tracker), tracker + 1)
        grow = tracker == self.interval
        grown = scale * self.growth
        scale = torch.where(found, scale * self.backoff, torch.where(grow & torch.isfinite(grown), grown, scale))
        tracker = torch.where(grow, torch.zeros_like(tracker), tracker)
        self.scale.index_copy_(0, rows, scale)
        self.tracker.index_copy_(0, rows, tracker)


def stacked_loss_scaler(precision: str, clients: int, device: torch.device) -> StackedLossScaler | None:
    return StackedLossScaler(clients, device) if autocast_dtype(precision) == torch.float16 else None
