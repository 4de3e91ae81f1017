"""opaque-call: compiled code (C++/pybind/tvm-ffi/ctypes) called from a traced frame."""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="opaque-call",
    why="a compiled extension (C++/pybind/tvm-ffi/ctypes) called from a traced frame",
    evidence="a C++/pybind/tvm-ffi/ctypes function called from traced code",
    # A torch C binding that returns a non-tensor (a raw stream handle,
    # torch._C._cuda_getCurrentRawStream) is just as opaque to the graph. So are
    # compiled objects flowing through traced code: a tvm-ffi Module Dynamo
    # cannot wrap, a C __hash__ it cannot trace into.
    # GB0208 "torch.* op returned non-Tensor", GB0116 "Unexpected type in
    # sourceless builder", GB2861 "Untraceable C tp_hash".
    rules=(Rule(gb_ids=frozenset({"GB0208", "GB0116", "GB2861"}),
                through=("ctypes",), culprits=("_ctypes.", "ctypes.", "tvm_ffi.", "PyCFuncPtrType.", "CFuncPtr"),
                extension_culprit=True),),
    advice="wrap-custom-op",
    ladder=("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    priority=60,
)
