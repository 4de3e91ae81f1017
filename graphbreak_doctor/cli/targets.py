"""The target options every tracing command shares: each provider's own
options (targets/registry.py), --mode, --device; and turning them into
selected targets and diagnoses."""

from __future__ import annotations

import argparse
from typing import Any

from graphbreak_doctor.cli.common import Progress, UsageError
from graphbreak_doctor.diagnose import MODE_CHOICES, diagnose, selection_builder
from graphbreak_doctor.emulation.presets import DEFAULT_DEVICE, PRESETS
from graphbreak_doctor.findings import Findings
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider
from graphbreak_doctor.targets.registry import PROVIDERS


def _argparse_type(option: Option):
    if option.type is None:
        return None

    def parse(text: str) -> Any:
        try:
            return option.type(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return parse


def add_target_options(p: argparse.ArgumentParser, default_mode: str = "both") -> None:
    for provider in PROVIDERS:
        group = p.add_argument_group(provider.title)
        for o in provider.options:
            group.add_argument(o.flag, dest=o.name, metavar=o.metavar, choices=o.choices, help=o.help,
                               type=_argparse_type(o))
    p.add_argument("--mode", choices=MODE_CHOICES, default=default_mode,
                   help="explain: every break; fullgraph: the first hard failure, as SGLang sees it; "
                        "both: explain + fullgraph; piecewise: fullgraph with the attention op as a split point "
                        f"(default: {default_mode})")
    emulated = [name for name, preset in PRESETS.items() if preset.emulated]
    p.add_argument("--device", choices=tuple(PRESETS), default=DEFAULT_DEVICE,
                   help=f"emulated GPU preset ({', '.join(emulated)}; default {DEFAULT_DEVICE}), "
                        "cuda for a real GPU, cpu for plain CPU tensors")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")


def _values(args: argparse.Namespace, provider: TargetProvider) -> dict[str, Any]:
    return {o.name: getattr(args, o.name, None) for o in provider.options}


def chosen_provider(args: argparse.Namespace) -> TargetProvider:
    """The provider whose selecting option was given; its options only."""
    chosen = [p for p in PROVIDERS if p.selected(_values(args, p))]
    flags = " or ".join(f for p in PROVIDERS for f in p.selecting_flags())
    if not chosen:
        raise UsageError(f"choose what to trace: {flags}")
    if len(chosen) > 1:
        given = ", ".join(f for p in chosen for f in p.selecting_flags())
        raise UsageError(f"choose one of {flags}, not several ({given})")
    provider = chosen[0]
    for other in PROVIDERS:
        if other is provider:
            continue
        for o in other.options:
            if not o.selects and getattr(args, o.name, None) is not None:
                raise UsageError(f"{o.flag} applies to {' / '.join(other.selecting_flags())} "
                                 f"({other.title}), not to {' / '.join(provider.selecting_flags())}")
    return provider


def selections(args: argparse.Namespace) -> list[Selection]:
    provider = chosen_provider(args)
    try:
        return provider.select(_values(args, provider))
    except ValueError as e:
        raise UsageError(str(e)) from e


def stem(selection: Selection, args: argparse.Namespace, what: str | None = None) -> str:
    """The file stem of a target's outputs: <target>-<device>-<mode or what>."""
    return f"{selection.name}-{args.device}-{what or args.mode}"


def run_diagnoses(args: argparse.Namespace, selected: list[Selection], progress: Progress) -> list[Findings]:
    return [diagnose(selection_builder(s, args.device), mode=args.mode, device=args.device, progress=progress)
            for s in selected]
