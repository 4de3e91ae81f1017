"""Stand-ins for the CUDA-only parts of wheels a serving framework imports.

SGLang's wheels ship binaries built against a CUDA build of torch; on this
machine's CPU build they cannot load. Each stand-in replaces exactly what
the import and the traced code path need from such a binary, and is
installed only when the binary is found not to load (op schemas only for
ops this process lacks). Everything goes through the undo log; ``install``
returns one line per stand-in, which the findings list
(``target.stand_ins``) so a reader knows what was not real.

One module per library stood in for. Here, the libraries any framework may
import:

- torchvision_c.py: torchvision's ``_C``, two op schemas, no kernel;
- cudart.py: a CUDA runtime library mapped for FlashInfer 0.6's comm module.

A framework's own libraries are stood in for by its package
(``Framework.install_stand_ins``), which ``install`` is handed:

- targets/frameworks/sglang/sgl_kernel_libs.py: sgl-kernel's ``common_ops``
  (an empty module and every op schema its binaries declare, read from
  their bytes by schemas.py) and its other kernel libraries (empty modules;
  FlashMLA's ops answer dry);
- targets/frameworks/sglang/deep_gemm_libs.py: DeepGEMM's op library (older
  releases) or its tvm-ffi kernel library, every function found, the
  indexer's kernels dry;
- targets/frameworks/vllm/vllm_libs.py: vLLM's native libraries (empty
  modules, and every op schema their binaries declare, in the namespaces
  vLLM's Python calls them by).

Every framework's are installed, whichever builds the model: one framework
can import another's package where both are installed.

binaries.py holds what they are made of. After the framework's import,
``register_missing_fakes`` gives the declared ``sgl_kernel`` ops that
return nothing and that SGLang left without a fake a no-op one (kernels
that only write their ``Tensor!`` arguments), which is what a dry kernel
does; the ops that return values keep SGLang's fakes.

See docs/design.md, "SGLang on a CPU build of torch".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from graphbreak_doctor.emulation.standins import catalogue
from graphbreak_doctor.emulation.standins.binaries import StandIns, no_op
from graphbreak_doctor.emulation.standins.cudart import map_cuda_runtime
from graphbreak_doctor.emulation.standins.schemas import TORCHVISION_SCHEMAS, schemas_in
from graphbreak_doctor.emulation.standins.torchvision_c import install_torchvision
from graphbreak_doctor.patching import UndoLog


def install(log: UndoLog, frameworks: Iterable[Callable[[UndoLog, StandIns], None]] = ()) -> StandIns:
    """Install what this machine lacks, before the framework is imported:
    the shared libraries' stand-ins and, through ``frameworks`` (each
    framework's ``install_stand_ins``), their own."""
    out = StandIns()
    if torch.backends.cuda.is_built():
        return out  # a CUDA build of torch loads the real binaries
    install_torchvision(log, out)
    for install_own in frameworks:
        install_own(log, out)
    map_cuda_runtime(log, out)
    _no_exit_calls_to_stand_ins(log, out)
    return out


def _no_exit_calls_to_stand_ins(log: UndoLog, out: StandIns) -> None:
    """A library that registers one of its ops as an exit callback (DeepGEMM
    registers its clean-up) would call, at interpreter exit, an op whose
    stand-in is gone by then: each such callback registered while the
    stand-ins are in place is unregistered when they go."""
    import atexit

    real = atexit.register
    registered: list = []

    def register(func, *args, **kwargs):
        registered.append(func)
        return real(func, *args, **kwargs)

    def unregister_stand_in_ops() -> None:
        for func in registered:
            if isinstance(func, torch._ops.OpOverload):
                namespace = func.namespace
            elif isinstance(func, torch._ops.OpOverloadPacket):
                namespace = func._qualified_op_name.split("::")[0]
            else:
                continue
            if namespace in out.libraries:
                atexit.unregister(func)

    log.call_on_undo(unregister_stand_in_ops)
    log.setattr(atexit, "register", register)


def register_missing_fakes(out: StandIns) -> None:
    """After the framework's import: give each declared op that still has no
    fake and returns nothing (a kernel that only writes its ``Tensor!``
    arguments) a no-op fake. An op that returns values keeps the fake the
    framework registered, or gets the doctor's catalogue entry; one without
    either is left so: a traced call to it fails, naming the op, as no
    stand-in can know its outputs. One line per namespace and kind."""
    theirs, ours, unanswered, known, aliases = {}, {}, {}, [], {}
    for qualname in out.declared:
        namespace, name = qualname.split("::", 1)
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta") or _has_fake(qualname):
            theirs.setdefault(namespace, []).append(name)
        elif qualname in catalogue.FAKES:
            torch.library.register_fake(qualname, catalogue.FAKES[qualname][0], lib=out.libraries[namespace])
            known.append(qualname)
        elif catalogue.answered(qualname):
            continue  # a host query with an answer of the catalogue's (defined with it)
        elif (fake := _alias_fake(getattr(getattr(torch.ops, namespace), name).default._schema)) is not None:
            torch.library.register_fake(qualname, fake, lib=out.libraries[namespace])
            aliases.setdefault(namespace, []).append(name)
        elif getattr(getattr(torch.ops, namespace), name).default._schema.returns:
            unanswered.setdefault(namespace, []).append(name)
        else:
            torch.library.register_fake(qualname, no_op, lib=out.libraries[namespace])
            ours.setdefault(namespace, []).append(name)
    for namespace, names in ours.items():
        out.lines.append(f"{namespace}::{{{len(names)} ops}}: the schemas its library declares, no kernel, a no-op "
                         "fake (kernels that only write their Tensor! arguments)")
    for namespace, names in aliases.items():
        out.lines.append(f"{namespace}::{{{', '.join(names)}}}: the library's schemas, no kernel, a fake that "
                         "returns a view of the argument the schema says the result aliases (Tensor(a) -> Tensor(a))")
    for namespace, names in theirs.items():
        out.lines.append(f"{namespace}::{{{', '.join(names)}}}: the library's schemas, no kernel (the framework "
                         "registers their fakes)")
    for qualname in known:
        out.lines.append(f"{qualname}: the library's schema, no kernel, a fake from the doctor's catalogue "
                         f"({catalogue.FAKES[qualname][1]})")
    for namespace, names in unanswered.items():
        out.lines.append(f"{namespace}::{{{', '.join(names)}}}: the library's schemas, no kernel and no fake (they "
                         "return values the framework registers no fake for: a traced call fails, naming the op)")


def _alias_fake(schema: torch._C.FunctionSchema):
    """For an op whose one result the schema declares an alias of one of its
    tensor arguments (``Tensor(a) x, ... -> Tensor(a)``, not written): a fake
    returning a view of that argument, its sizes and strides; else None."""
    if len(schema.returns) != 1 or schema.returns[0].alias_info is None or schema.returns[0].alias_info.is_write:
        return None
    sets = schema.returns[0].alias_info.before_set
    index = next((i for i, a in enumerate(schema.arguments)
                  if a.alias_info is not None and a.alias_info.before_set == sets), None)
    if index is None:
        return None
    name = schema.arguments[index].name

    def fake(*args, **kwargs):
        tensor = args[index] if index < len(args) else kwargs[name]
        return torch.ops.aten.alias.default(tensor)

    return fake


def _has_fake(qualname: str) -> bool:
    from torch._library import simple_registry

    return simple_registry.singleton.find(qualname).fake_impl.kernel is not None


__all__ = [
    "TORCHVISION_SCHEMAS",
    "StandIns",
    "install",
    "register_missing_fakes",
    "schemas_in",
]
