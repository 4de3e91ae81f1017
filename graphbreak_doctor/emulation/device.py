"""EmulatedDevice: a CPU-only machine that looks like a chosen NVIDIA GPU."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from graphbreak_doctor.emulation.host_memory import HostMemoryMode

from graphbreak_doctor.emulation import cuda_driver, cuda_runtime, dsl_dry, nvml, torch_surface
from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
from graphbreak_doctor.emulation.flashinfer import JitRecord
from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.emulation.presets import emulated_names, resolve_device
from graphbreak_doctor.patching import UndoLog


class EmulatedDevice:
    """Context manager: PyTorch and FlashInfer see `device`; undone on exit.

    Inside, a FakeTensorMode is active (`self.fake_mode`), so
    `torch.empty(..., device="cuda")` is a FakeTensor on cuda:0 that owns no
    memory; FlashInfer's JIT runs dry and each build/load it requests is
    appended to `self.jit_requests` and passed to `on_jit` at once.

    "cuda" and "cpu" emulate nothing: no patches, no fake mode (real tensors).
    An instance may be entered again after it exits, and emulations may nest.
    While emulated, `self.scratch` is a temporary folder for what the
    emulated toolkit and the traced libraries write (removed on exit), and
    `EmulatedDevice.active()` is the innermost active emulation.
    """

    _active: ClassVar[list["EmulatedDevice"]] = []

    def __init__(
        self,
        device: Optional[str] = None,
        on_jit: Optional[Callable[[JitRecord], None]] = None,
        gpus: Optional[int] = None,
    ) -> None:
        self.preset: DevicePreset = resolve_device(device)
        # The GPUs of the emulated node: the preset's server, or more where
        # a launch spans more on one node (device_count() answers it).
        self.gpus = max(self.preset.node_gpus, gpus or 0)
        self.name = self.preset.name
        self.on_jit = on_jit
        self.jit_requests: list[JitRecord] = []
        self.fake_mode: Optional[FakeTensorMode] = None
        self.scratch: Optional[Path] = None
        self._scratches: list[Optional[Path]] = []
        self._logs: list[UndoLog] = []
        self._modes: list[Optional[FakeTensorMode]] = []
        self._facts: dict = {}
        # The emulated torch.cuda entry points that ran, in first-call order.
        self.exercised: list[str] = []
        # Kernels of Python kernel languages launched dry (dsl_dry.py), each once.
        self.dry_launches: list[str] = []

    @property
    def emulated(self) -> bool:
        return self.preset.emulated

    def _exercised(self, name: str) -> None:
        if name not in self.exercised:
            self.exercised.append(name)

    def _allocated(self, index: int) -> int:
        mode = self.fake_mode
        return mode.allocated(index) if isinstance(mode, HostMemoryMode) else 0

    def dry_launch(self, name: str) -> None:
        if name not in self.dry_launches:
            self.dry_launches.append(name)

    def _record(self, action: str, name: str, path: str, exports: tuple) -> JitRecord:
        request = JitRecord(
            seq=flashinfer_emulation.next_seq(),
            name=name,
            action=action,
            device=self.name,
            path=path,
            exports=tuple(exports),
        )
        self.jit_requests.append(request)
        if self.on_jit is not None:
            self.on_jit(request)
        return request

    def __enter__(self) -> "EmulatedDevice":
        if self.name == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                "--device cuda needs a CUDA build of PyTorch and a visible GPU; "
                f"use an emulated device ({emulated_names()}) on this machine"
            )
        log = UndoLog()
        mode: Optional[FakeTensorMode] = None
        scratch: Optional[Path] = None
        try:
            if self.emulated:
                scratch = Path(tempfile.mkdtemp(prefix=f"graphbreak-doctor-{self.name}-"))
                log.call_on_undo(lambda: shutil.rmtree(scratch, ignore_errors=True))
                # This package's frames (the audit hook, the dry loader) run
                # inside calls Dynamo traces; Dynamo must never trace them.
                log.dynamo_skip("graphbreak_doctor.emulation")
                # FlashInfer computes arch-dependent state at import (jit/core.py
                # current_compilation_context probes the device): import it
                # while torch still answers for the real machine, so that what
                # is saved for undo is the real state. A FlashInfer that asks
                # the device in a module body cannot be imported without one:
                # it is imported by flashinfer_emulation.install below, under the
                # emulation, and its import-time answers are this device's.
                read_at_import = flashinfer_emulation.import_on_this_machine()
                torch_surface.install(self.preset, log, self._exercised, self.gpus, self._allocated)
                cuda_runtime.install(log, self.gpus, self._exercised)
                dsl_dry.install(log, self.dry_launch)
                cuda_driver.install(log, self.preset, self.gpus, self._exercised)
                nvml.install(log, self.preset, self.gpus, self._exercised)
                self._facts = flashinfer_emulation.install(self.preset, log, self._record, scratch, self.gpus)
                if read_at_import:
                    self._facts["flashinfer_imported_under_emulation"] = (
                        f"FlashInfer asks the device at import ({read_at_import}): imported on the emulated "
                        f"{self.name}, whose answers it keeps for the rest of the process")
                mode = HostMemoryMode(allow_non_fake_inputs=True)
                mode.__enter__()
        except BaseException:
            log.undo()
            raise
        self._logs.append(log)
        self._modes.append(mode)
        self._scratches.append(scratch)
        self.fake_mode, self.scratch = mode, scratch
        if self.emulated:
            EmulatedDevice._active.append(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        log = self._logs.pop()
        mode = self._modes.pop()
        self._scratches.pop()
        if self.emulated:
            active = EmulatedDevice._active
            del active[len(active) - 1 - active[::-1].index(self)]  # this instance's innermost entry
        try:
            if mode is not None:
                mode.__exit__(*exc_info)
        finally:
            self.fake_mode = self._modes[-1] if self._modes else None
            self.scratch = self._scratches[-1] if self._scratches else None
            log.undo()

    @classmethod
    def active(cls) -> Optional["EmulatedDevice"]:
        """The innermost emulation that is active, if any."""
        return cls._active[-1] if cls._active else None

    def describe(self) -> dict:
        """Plain, JSON-able facts about the device, for the findings."""
        info = self.preset.describe()
        if self.name == "cuda" and torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info.update(
                gpu=props.name,
                capability=f"{props.major}.{props.minor}",
                sms=props.multi_processor_count,
                memory_gb=round(props.total_memory / 1024**3),
                cuda=torch.version.cuda,
            )
        info["torch"] = torch.__version__.split("+")[0]
        if self.emulated:
            if not self._facts and flashinfer_emulation.flashinfer_installed():
                import flashinfer

                self._facts = {"flashinfer": getattr(flashinfer, "__version__", None)}
            info.update({k: v for k, v in self._facts.items() if k != "jit_cache"})
            # Which emulated torch.cuda entry points the target ran.
            info["emulated_entry_points"] = list(self.exercised)
            # FlashInfer host code built for this machine, for the modules this device loaded.
            loaded = {r.name for r in self.jit_requests if r.action == "load"}
            host = {name: list(lib.exports) if not lib.unavailable else f"not built: {lib.unavailable}"
                    for name, lib in flashinfer_emulation.host_libraries().items() if name in loaded}
            if host:
                info["flashinfer_host_code"] = host
        return info

    def __repr__(self) -> str:
        return f"EmulatedDevice({self.name!r})"
