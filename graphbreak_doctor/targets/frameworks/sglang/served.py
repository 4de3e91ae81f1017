"""The architectures the installed SGLang serves, read from its files.

SGLang's model registry is the ``EntryClass`` of each module in
``sglang/srt/models/`` (a class or a list of classes; the registry keys them
by class name). Reading those assignments from the source gives the same
names without importing SGLang, which needs the emulated device first: the
command line and the tests ask it before any worker starts."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def models_folder() -> Path | None:
    """``sglang/srt/models`` of the installed SGLang, or None."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "srt" / "models"
    return folder if folder.is_dir() else None


def _entry_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if not any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in targets) or node.value is None:
            continue
        value = node.value
        for item in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
            if isinstance(item, ast.Name):
                names.append(item.id)
            elif isinstance(item, ast.Attribute):
                names.append(item.attr)
    return names


def served_architectures() -> dict[str, str]:
    """architecture -> the module of ``sglang.srt.models`` that registers it
    ({} without SGLang)."""
    folder = models_folder()
    if folder is None:
        return {}
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue  # a file the registry would not import either
        for name in _entry_names(tree):
            out.setdefault(name, f"sglang.srt.models.{path.stem}")
    return out


__all__ = ["models_folder", "served_architectures"]
