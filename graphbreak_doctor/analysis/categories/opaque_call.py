"""opaque-call: compiled code (C++/pybind/tvm-ffi/ctypes) called from a traced frame."""

from graphbreak_doctor.analysis.categories.category import Category, Rule

# torch's questions about the GPU whose answers hold for the life of the
# process (a name, a capability, a count): they return a str, a tuple, an
# int, a properties object, never a tensor, so an opaque op cannot return
# them; the fix is to ask once before capture and read the answer while
# tracing. (A raw stream handle is not among them: it changes when a CUDA
# graph is captured on a stream of its own.)
DEVICE_QUERIES = tuple(f"torch.cuda.{name}" for name in (
    "get_device_name", "get_device_capability", "get_device_properties", "device_count", "is_available",
    "get_arch_list", "is_bf16_supported"))

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
    rules=(Rule(culprits=DEVICE_QUERIES, advice="hoist-call"),
           Rule(gb_ids=frozenset({"GB0208", "GB0116", "GB2861"}),
                through=("ctypes",), culprits=("_ctypes.", "ctypes.", "tvm_ffi.", "PyCFuncPtrType.", "CFuncPtr"),
                extension_culprit=True),),
    advice="wrap-custom-op",
    ladder=("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    priority=60,
)
