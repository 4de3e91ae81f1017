"""``--layer dense|moe|all``: GLM-5-NVFP4 decoder layers at real shapes, with
their own options (``--config``, ``--tokens``, ``--tp``)."""

from __future__ import annotations

from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider

LAYER_CHOICES = ("dense", "moe", "all")
DEFAULT_TOKENS = 128
DEFAULT_TP = 1
ALL_NOTE = "--layer all traces one dense and one MoE layer; the other 76 decoder layers run the same code"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"expected an integer >= 1, got {text!r}")
    return value


class Glm5Provider(TargetProvider):
    name = "glm5"
    title = "GLM-5-NVFP4 decoder layers"
    options = (
        Option("--layer", "a GLM-5-NVFP4 decoder layer (all = one dense + one MoE)", choices=LAYER_CHOICES,
               selects=True),
        Option("--config", "GLM-5 config.json (or its folder) of the same architecture "
                           "(default: the config shipped with graphbreak-doctor)", metavar="PATH"),
        Option("--tokens", f"tokens in the batch (default {DEFAULT_TOKENS})", metavar="N", type=positive_int),
        Option("--tp", f"tensor-parallel size: per-rank shard shapes (default {DEFAULT_TP})", metavar="N",
               type=positive_int),
    )

    def select(self, options: Mapping[str, Any]) -> list[Selection]:
        from graphbreak_doctor.targets.glm5.config import load_config

        layer = options["layer"]
        # Read now, so a bad --config is a usage error before anything is traced.
        config = load_config(options.get("config"))
        kinds = ["dense", "moe"] if layer == "all" else [layer]
        common = {
            "config": config.path,
            "tokens": options.get("tokens") or DEFAULT_TOKENS,
            "tp": options.get("tp") or DEFAULT_TP,
            "all": layer == "all",
        }
        return [Selection(self.name, f"glm5-{kind}", {"kind": kind, **common},
                          spec=f"glm5:{kind}:{config.layer_indices(kind)[0]}") for kind in kinds]

    def build(self, selection: Selection, device: str, log: UndoLog) -> Target:
        from graphbreak_doctor.targets.glm5 import builder as glm5

        o = selection.options
        try:
            target = glm5.build_layer(o["kind"], config=o["config"], tokens=o["tokens"], tp=o["tp"], device=device)
        except ValueError as e:
            raise TargetError(str(e)) from e
        if o.get("all"):
            target.info.notes.append(ALL_NOTE)
        return target


PROVIDER = Glm5Provider()
