"""Using an accelerator fully while training: bf16 autocast, channels_last, data on the
device, ``torch.compile`` where it pays back (on the CPU too, for the parts that declare
it pays there: :func:`compile_cpu_parts`).

The stages' step functions stay device-agnostic. :func:`accelerated` sets the ambient
settings for one stage (autocast is thread-local state in torch; the rest lives in a
context variable that :func:`prepare_module` reads), and :func:`hold_frames` gives the
frames a copy on the device that :func:`frames_batch` gathers from. Every helper is a
no-op on the CPU, so CPU training is unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccelConfig:
    """How a stage uses an accelerator (ignored on the CPU).

    bf16: autocast forward passes to bfloat16 (no loss scaling needed).
    channels_last: NHWC weights, so cuDNN picks its tensor-core kernels.
    data_on_device: keep frames / latents on the device when they fit in
        ``device_memory_fraction`` of its free memory (no per-step host gather or copy).
    compile: ``torch.compile`` the trained module's children; only worth its warm-up
        (tens of seconds) on long stages, so only when the stage has at least
        ``compile_min_minutes``.
    """

    bf16: bool = True
    channels_last: bool = True
    data_on_device: bool = True
    device_memory_fraction: float = 0.5
    compile: bool = True
    compile_min_minutes: float = 20.0


_ACTIVE: contextvars.ContextVar[tuple[AccelConfig, bool] | None] = contextvars.ContextVar(
    "factory_accel", default=None
)


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


@contextlib.contextmanager
def accelerated(
    cfg: AccelConfig, device: str | torch.device, stage_minutes: float | None = None
) -> Iterator[None]:
    """Run one stage under ``cfg`` on ``device`` (a no-op on the CPU)."""
    if not is_cuda(device):
        yield
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    compile_now = cfg.compile and (stage_minutes or 0.0) >= cfg.compile_min_minutes
    token = _ACTIVE.set((cfg, compile_now))
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16):
            yield
    finally:
        _ACTIVE.reset(token)


def prepare_module(module: nn.Module) -> nn.Module:
    """Apply the active settings to a module about to be trained (in place)."""
    active = _ACTIVE.get()
    if active is None:
        return module
    cfg, compile_now = active
    if cfg.channels_last:
        module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if compile_now:
        for child in module.children():
            child.compile()
        log.info("compiled the children of %s", type(module).__name__)
    return module


CPU_COMPILE_MIN_MINUTES = 20.0
"""A CPU stage compiles its parts only with at least this many wall minutes of budget: the
warm-up costs one to two minutes on two cores (less where inductor's cache has them)."""


def cpu_compile_wanted(flag: bool | None, stage_minutes: float | None) -> bool:
    """Whether a CPU stage compiles: ``flag`` when given (``--compile`` /
    ``--no-compile``), else when its budget is at least :data:`CPU_COMPILE_MIN_MINUTES`
    of wall time (a budget of steps alone says nothing of time: no)."""
    if flag is not None:
        return flag
    return stage_minutes is not None and stage_minutes >= CPU_COMPILE_MIN_MINUTES


def compile_cpu_parts(module: nn.Module) -> list[str]:
    """``torch.compile`` (dynamic shapes, in place, so the state dict keeps its keys) every
    submodule of ``module`` whose class sets ``cpu_compile = True``: those measured to
    pay back their warm-up on a CPU. Inductor compiles in this process
    (``compile_threads`` 1), so a budget of CPU minutes counts the warm-up too. Returns
    the compiled submodules' names; none without a C++ compiler (a warning says so)."""
    parts = [(n, m) for n, m in module.named_modules() if getattr(m, "cpu_compile", False)]
    if not parts:
        return []
    if shutil.which("c++") is None and shutil.which("g++") is None:
        log.warning("no C++ compiler on PATH: training uncompiled")
        return []
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    for _, part in parts:
        part.compile(dynamic=True)
    names = [n or type(module).__name__ for n, _ in parts]
    log.info("compiled for the CPU: %s", ", ".join(names))
    return names


def fits_on_device(nbytes: int, device: str | torch.device, fraction: float) -> bool:
    """Whether ``nbytes`` fit in ``fraction`` of the device's free memory."""
    if not is_cuda(device):
        return False
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return nbytes <= fraction * free


def keep_on_device(t: Tensor, device: str | torch.device) -> Tensor:
    """``t`` moved to ``device`` when a stage runs :func:`accelerated` with
    ``data_on_device`` and it fits; else ``t`` unchanged."""
    active = _ACTIVE.get()
    if active is None or not active[0].data_on_device:
        return t
    if not fits_on_device(t.numel() * t.element_size(), device, active[0].device_memory_fraction):
        return t
    return t.to(device)


class MirroredFrames(np.ndarray):
    """An ndarray of frames (N, H, W, 3) uint8 that also holds ``device_copy``, the same
    frames on the accelerator. Views and slices of it carry no copy."""

    device_copy: Tensor | None = None

    def __array_finalize__(self, obj: object) -> None:
        self.device_copy = None


def hold_frames(frames: np.ndarray, device: str | torch.device, cfg: AccelConfig) -> np.ndarray:
    """``frames`` with a device copy attached when on CUDA, wanted and fitting; else as is."""
    if not (
        cfg.data_on_device and fits_on_device(frames.nbytes, device, cfg.device_memory_fraction)
    ):
        return frames
    mirrored = frames.view(MirroredFrames)
    mirrored.device_copy = torch.from_numpy(np.ascontiguousarray(frames)).to(device)
    log.info("holding %.0f MB of frames on %s", frames.nbytes / 2**20, device)
    return mirrored


def gather_frames(frames: np.ndarray, idx: np.ndarray, device: str | torch.device) -> Tensor:
    """uint8 frames[idx] (B, H, W, 3) on ``device``: gathered there from the device copy
    when ``frames`` has one, else gathered in RAM and copied."""
    copy = getattr(frames, "device_copy", None)
    if copy is not None and copy.device.type == torch.device(device).type:
        index = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(copy.device)
        return copy[index]
    return torch.from_numpy(np.asarray(frames[idx])).to(device)
