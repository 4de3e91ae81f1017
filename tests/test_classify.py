"""The rule table on break shapes seen in real FlashInfer traces (GLM-5 dense layer, emulated sm120)."""

import subprocess

import pytest

from graphbreak_doctor.analysis.categories import CATEGORIES, REGISTRY
from graphbreak_doctor.analysis.classify import advice_for, classify, culprit_of, match
from graphbreak_doctor.analysis.registry import gb_id_for
from graphbreak_doctor.model import Frame

SUBPROCESS_PY = subprocess.__file__


def frame(file, fn="f", line=1):
    return Frame(file=file, line=line, function=fn)


@pytest.mark.parametrize("gb_type,explanation,context,stack,category", [
    ("Unsupported context manager", "Dynamo does not know how to enter a `RLock` context manager.",
     "Attempted SETUP_WITH on UserDefinedObjectVariable(RLock)", [frame("/x/flashinfer/autotuner/autotuner.py")],
     "unsupported-builtin"),
    ("Missing bytecode handler", "Dynamo does not know how to handle the bytecode instruction `LOAD_NAME`.", "",
     [frame("/x/flashinfer/gemm/gemm_base.py")], "unsupported-builtin"),
    ("Unsupported function call", "Dynamo does not know how to trace the function `frozenset[str]`",
     "call_function TypingVariable() [] {}", [frame("/x/flashinfer/autotuner/autotuner.py")], "unsupported-builtin"),
    ("Attempted to call function marked as skipped", "marked `use_mem_pool` should not be traced",
     "module: torch.cuda.memory, qualname: use_mem_pool, skip reason: file matches MOD_SKIPLIST",
     [frame("/x/flashinfer/utils.py")], "unsupported-builtin"),
    ("torch.* op returned non-Tensor", "torch.* ops that return a non-Tensor cannot be traced",
     "example_value type: int; op: call_function", [frame("/x/flashinfer/utils.py")], "opaque-call"),
    ("Attempted to call function marked as skipped", "Dynamo does not know how to trace the builtin `_thread.allocate_lock.`",
     "module: _thread, qualname: allocate_lock, skip reason: cannot determine source file",
     [frame("/x/flashinfer/jit/cpp_ext.py"), frame(SUBPROCESS_PY, "check_output")], "subprocess"),
    ("Unsupported method call", "Dynamo does not know how to trace method `__call__` of class `Function`",
     "call_method UserDefinedObjectVariable(Function) __call__", [frame("/x/tvm_ffi/module.py")], "opaque-call"),
])
def test_rules(gb_type, explanation, context, stack, category):
    culprit = culprit_of(explanation, context)
    assert classify(gb_id_for(gb_type), culprit, stack) == category


def test_every_rule_names_a_known_category_and_other_is_the_fallback():
    assert [c.name for c in REGISTRY] == list(CATEGORIES)
    assert classify("", "", [frame("/x/y.py")]) == "other"


# File objects entered as context managers: Dynamo's object names (capture reads
# them from its variable tracker) and the bare names of its message text.
@pytest.mark.parametrize("culprit", ["_io.TextIOWrapper", "_io.BufferedReader", "_io.FileIO", "mmap.mmap",
                                     "tempfile._TemporaryFileWrapper", "posix.ScandirIterator", "TextIOWrapper",
                                     "BufferedReader", "FileIO", "ScandirIterator", "SpooledTemporaryFile"])
def test_file_objects_are_filesystem(culprit):
    stack = [frame("/home/u/model.py", "forward")]
    assert classify(gb_id_for("Unsupported context manager"), culprit, stack) == "filesystem"


def test_locks_and_memory_pools_are_context_managers_to_enter_outside():
    stack = [frame("/x/flashinfer/autotuner/autotuner.py")]
    for culprit in ("_thread.RLock", "_thread.lock", "contextlib._GeneratorContextManager"):
        category, rule = match(gb_id_for("Unsupported context manager"), culprit, stack)
        assert (category.name, rule.advice) == ("unsupported-builtin", "enter-outside")
    # A BytesIO is memory, not the file system.
    category, _ = match(gb_id_for("Unsupported context manager"), "_io.BytesIO", stack)
    assert category.name == "unsupported-builtin"


def test_a_question_about_the_device_is_asked_once_before_capture_not_made_an_op():
    """torch's device queries return a str, a tuple or an int: an opaque op
    cannot return them, so the advice is to ask before capture. Other
    torch calls that return no tensor (a raw stream handle, which a CUDA
    graph's own stream changes) keep the opaque-op advice."""
    stack = [frame("/home/u/model.py", "forward")]
    returned = gb_id_for("torch.* op returned non-Tensor")
    for query in ("torch.cuda.get_device_name", "torch.cuda.get_device_capability", "torch.cuda.device_count"):
        category, rule = match(returned, query, stack)
        assert (category.name, advice_for(category, rule)) == ("opaque-call", "hoist-call"), query
    category, rule = match(returned, "torch._C._cuda_getCurrentRawStream", stack)
    assert (category.name, advice_for(category, rule)) == ("opaque-call", "wrap-custom-op")


@pytest.mark.parametrize("exceptions,advice", [
    (["torch._dynamo.exc.UserError", "torch._dynamo.exc.UserErrorType.ANTI_PATTERN",
      "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode"], "static-control-flow"),
    (["torch.fx.experimental.symbolic_shapes.ConstraintViolationError"], "keep-size-dynamic"),
    (["torch._dynamo.exc.UserError", "torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION"], "static-control-flow"),
])
def test_capture_failures_are_classified_by_exception_type(exceptions, advice):
    """No registry id: the exception types are the evidence, never the message."""
    category, rule = match("", "", [frame("/home/u/model.py", "forward")], exceptions)
    assert category.name == "data-dependent"
    assert (rule.advice or category.advice) == advice


def test_a_crash_type_is_not_a_capture_failure():
    category, rule = match("", "", [frame("/home/u/model.py")], ["torch._dynamo.exc.TorchRuntimeError"])
    assert (category.name, rule) == ("other", None)


def test_rules_name_registry_ids_that_exist():
    """Rules are keyed on Dynamo's registry ids: each one must be in this torch's registry."""
    from graphbreak_doctor.analysis.classify import _REFUSED_CALL
    from graphbreak_doctor.analysis.registry import _registry

    ids = {gb_id for c in REGISTRY for r in c.rules for gb_id in r.gb_ids} | _REFUSED_CALL
    assert ids and ids <= set(_registry())
