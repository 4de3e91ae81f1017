"""A framework's refusal is told by the statement that raised it
(frames.own_check): an ``assert`` or a ``raise`` in the framework's own
code, not raised while handling another exception, and not a
NotImplementedError. Held against a package written to a temporary folder
and imported as any installed one is."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from graphbreak_doctor.frames import own_check

SOURCE = textwrap.dedent('''
    import json

    def asserts(major):
        assert major >= 9 and major <= 9, (
            f"needs SM90, not SM{major}0")

    def refuses():
        raise ValueError("this backend does not run on this device")

    def abstract():
        raise NotImplementedError

    def rewraps():
        try:
            json.loads("{")
        except ValueError as e:
            raise RuntimeError("the config does not parse") from e

    def fails_deeper():
        return json.loads("{")

    def divides():
        return 1 // 0
''')


@pytest.fixture
def framework(tmp_path, monkeypatch):
    package = tmp_path / "toyframework"
    package.mkdir()
    (package / "__init__.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("toyframework")
    yield module
    sys.modules.pop("toyframework", None)


def _raised(call, *args) -> BaseException:
    with pytest.raises(Exception) as info:
        call(*args)
    return info.value


def test_an_assert_or_a_raise_in_the_frameworks_code_is_its_check(framework):
    check = own_check(_raised(framework.asserts, 10), "toyframework")
    assert check is not None and check.function == "asserts" and check.code.startswith("assert major >= 9")
    assert check.line == SOURCE.splitlines().index("    assert major >= 9 and major <= 9, (") + 1
    check = own_check(_raised(framework.refuses), "toyframework")
    assert check is not None and check.function == "refuses" and check.code.startswith("raise ValueError")


def test_a_failure_that_is_no_check_of_its_own_is_not_a_refusal(framework):
    assert own_check(_raised(framework.abstract), "toyframework") is None  # left to a subclass
    assert own_check(_raised(framework.rewraps), "toyframework") is None  # reports a failure deeper down
    assert own_check(_raised(framework.fails_deeper), "toyframework") is None  # raised in json
    assert own_check(_raised(framework.divides), "toyframework") is None  # no check: an expression failed
    assert own_check(_raised(framework.asserts, 10), "another") is None  # another package's check
