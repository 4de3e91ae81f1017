"""Launch arguments as text: split as a shell does, and one flag's value
taken out, the way every framework's grammar starts (framework.py)."""

from __future__ import annotations

import shlex


def split(text: str, option: str, empty: str) -> list[str]:
    """``option``'s launch arguments split as a shell does; one line when they
    do not split or hold none (``empty`` says what to give)."""
    try:
        args = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"{option}: {e} in {text!r}") from e
    if not args:
        raise ValueError(f"{option} is empty: {empty}")
    return args


def take_value(args: list[str], flag: str, option: str) -> tuple[str | None, list[str]]:
    """The value of ``flag`` in ``args`` (``flag VALUE`` or ``flag=VALUE``;
    the last one given), and the other arguments, in order."""
    value, rest, i = None, [], 0
    while i < len(args):
        arg = args[i]
        if arg == flag:
            if i + 1 >= len(args):
                raise ValueError(f"{option}: {arg} needs a value")
            value, i = args[i + 1], i + 2
            continue
        if arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return value, rest


__all__ = ["split", "take_value"]
