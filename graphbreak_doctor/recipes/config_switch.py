"""Dynamo's own switches as fixes: the break names the setting that lets
Dynamo compile the code as it is, and the change sets it.

- ``allow-rnn``: ``nn.RNN``/``GRU``/``LSTM`` modules are traced
  (``allow_rnn``; Dynamo calls its support experimental, so the ladder's
  comparison of compiled and eager outputs matters here);
- ``ignore-logging-call``: a ``logging.Logger`` method Dynamo cannot trace
  becomes a no-op under torch.compile (``ignore_logging_functions``; older
  releases call it ``ignore_logger_methods``); it logs as before outside
  compile -- what guarding it with ``torch.compiler.is_compiling()`` does.

A switch changes every compile of the process, as a server's own setting
does; whether it is a fix is the ladder's rule (the breaks strictly fall,
none is new). In this process the option is set through the undo log; a
written patch sets it in ``torch._dynamo.config`` itself, right after that
module is imported (kind ``config``, fix/emit.py).

Not here: ``capture_scalar_outputs`` and ``capture_dynamic_output_shape_ops``.
Under ``fullgraph=True`` torch 2.13 captures scalar outputs and
data-dependent output sizes whatever they say (docs/design.md), so the
ladder, which climbs fullgraph failures, never meets the breaks they lift.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable

from graphbreak_doctor.frames import short_path
from graphbreak_doctor.model import Break
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes.common import where_of
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, NotApplicable, Plan, Recipe

_CONFIG = "torch._dynamo.config"


@dataclass(frozen=True)
class Setting:
    """One option of torch._dynamo.config as the change sets it: its name,
    the value in this process (from the option's current value), and the
    statements a written patch runs in the config module (``_config`` is
    the module there)."""

    option: str
    value: Any
    statements: list[str]
    shown: str  # the lines a person adds before torch.compile
    # Where a written patch runs the statements: the config module, or the
    # module that must be imported before they can run (a library's own
    # Logger method exists once that library has added it).
    module: str = _CONFIG


def _flag(option: str) -> Callable[[Break, Any], Setting]:
    """The boolean option, set to True."""
    def setting(brk: Break, config: Any) -> Setting:
        if not hasattr(config, option):
            raise NotApplicable(f"this torch has no torch._dynamo.config.{option}")
        if getattr(config, option) is True:
            raise NotApplicable(f"torch._dynamo.config.{option} is already True")
        return Setting(option, True, [f"_config.{option} = True"], f"torch._dynamo.config.{option} = True")

    return setting


def _logger_method(brk: Break, config: Any) -> Setting:
    """The Logger method the break names, added to the functions Dynamo
    ignores (the option's name in this torch)."""
    import logging

    option = next((o for o in ("ignore_logging_functions", "ignore_logger_methods") if hasattr(config, o)), "")
    if not option:
        raise NotApplicable("this torch has no switch that makes Dynamo ignore a logging call")
    prefix = "logging.Logger."
    method = brk.culprit[len(prefix):] if brk.culprit.startswith(prefix) else ""
    fn = inspect.getattr_static(logging.Logger, method, None) if method.isidentifier() else None
    if not callable(fn):
        raise NotApplicable(f"{brk.culprit or 'the call'} is not a method of logging.Logger")
    current = set(getattr(config, option))
    if fn in current:
        raise NotApplicable(f"logging.Logger.{method} is already in torch._dynamo.config.{option}")
    # A method a library adds to Logger (transformers' warning_once) exists
    # only once that library's module has run: the patch adds it there.
    owner = getattr(inspect.unwrap(fn), "__module__", None) or "logging"
    return Setting(option, current | {fn},
                   ["import logging", f"_config.{option} = {{*_config.{option}, logging.Logger.{method}}}"],
                   f"import logging\ntorch._dynamo.config.{option}.add(logging.Logger.{method})",
                   module=_CONFIG if owner == "logging" or owner not in sys.modules else owner)


def _planner(recipe: str, gb_ids: frozenset[str], setting: Callable[[Break, Any], Setting]) -> Callable:
    def plan(brk: Break, ctx: FixContext) -> Plan:
        import torch._dynamo.config as config

        if brk.gb_id not in gb_ids:
            raise NotApplicable(f"not a break Dynamo names this switch for ({', '.join(sorted(gb_ids))})")
        chosen = setting(brk, config)
        site = brk.site
        patch = (f"--- {short_path(site.file)} (before torch.compile, where the process sets up)\n"
                 + "".join(f"+{line}\n" for line in ["import torch._dynamo", *chosen.shown.splitlines()]))
        home = sys.modules[chosen.module] if chosen.module != _CONFIG else config
        change = Change("config", chosen.module, chosen.option, inspect.getsourcefile(home) or "",
                        settings=list(chosen.statements),
                        holds="every compile of the process (a setting of torch._dynamo.config)", every_size=True)

        def apply(ps: PatchSet) -> str:
            ps.set_option(config, chosen.option, chosen.value)
            return f"{chosen.shown.splitlines()[-1]} (in this process)"

        return Plan(recipe, f"{_CONFIG}.{chosen.option}", where_of(site), patch, apply, change=change)

    return plan


RECIPES = (
    Recipe(
        "allow-rnn",
        Advice("Let Dynamo trace {call}: torch._dynamo.config.allow_rnn = True",
               "Dynamo does not trace RNN, GRU and LSTM modules unless told to (its support is experimental: "
               "compare the compiled outputs with eager ones); otherwise keep the recurrent module outside the "
               "compiled region.",
               "torch._dynamo.config.allow_rnn = True   # before torch.compile"),
        # GB0014: "Attempted to wrap RNN, GRU, or LSTM".
        plan=_planner("allow-rnn", frozenset({"GB0014"}), _flag("allow_rnn")),
    ),
    Recipe(
        "ignore-logging-call",
        Advice("Have Dynamo skip {call} while compiling: add it to torch._dynamo.config.ignore_logging_functions",
                "Dynamo cannot trace a logging.Logger call; told to ignore the method, it drops the call from "
                "compiled code (it logs as before outside torch.compile), as a torch.compiler.is_compiling() "
                "guard does.",
                "torch._dynamo.config.ignore_logging_functions.add(logging.Logger.warning)   # before torch.compile"),
        # GB0291: "logging.Logger method not supported for non-export cases".
        plan=_planner("ignore-logging-call", frozenset({"GB0291"}), _logger_method),
    ),
)
