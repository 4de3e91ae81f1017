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
    rules=(Rule(gb_types=frozenset({"torch.* op returned non-Tensor", "Unexpected type in sourceless builder",
                                    "Untraceable C tp_hash"}),
                through=("ctypes",), culprits=("_ctypes.", "ctypes.", "tvm_ffi.", "PyCFuncPtrType.", "CFuncPtr"),
                extension_culprit=True),),
    advice="wrap-custom-op",
    ladder=("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    priority=60,
)
