"""unsupported-builtin: builtins, stdlib objects and runtime APIs Dynamo cannot model."""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="unsupported-builtin",
    why="a builtin, stdlib object or runtime API Dynamo cannot model",
    evidence="`SimpleNamespace`, `datetime.now`, locks, `min(d.keys(), key=...)`",
    # Locks and generator-based context managers (FlashInfer's autotuner
    # `with self._lock:`), a `class` statement executed on the traced path
    # (LOAD_NAME has no handler), and torch runtime APIs Dynamo skips on
    # purpose (torch.cuda.use_mem_pool).
    # A context manager Dynamo cannot enter (GB0142) gets its own advice: enter
    # it outside the compiled region. So do torch's context-manager functions
    # Dynamo skips (torch.cuda.use_mem_pool, a generator the `with` enters).
    rules=(Rule(gb_ids=frozenset({"GB0142"}), culprits=("torch.cuda.memory.use_mem_pool", "torch.cuda.graphs.",
                                                          "torch.cuda.streams.", "torch.cuda.stream"),
                advice="enter-outside"),
           # Missing bytecode handler (GB0082), invalid __build_class__ (GB8977),
           # functions not implemented in python (GB0177).
           Rule(gb_ids=frozenset({"GB0082", "GB8977", "GB0177"}),
                culprits=("torch.cuda.", "torch._utils.", "torch._C."),
                stdlib_culprit=True),
           # Python objects Dynamo has no graph value for: a typing construct
           # subscripted with a class it keeps opaque (`Optional[torch.Generator]`
           # in a signature defined on the traced path, GB9137), an object
           # with no proxy handed to an operation (`assert runners` over a list
           # of runner objects, GB0055), a sort whose key gives objects it
           # cannot compare (tuples of runner attributes, GB0207), an op
           # called with a non-contiguous `out=` tensor (SGLang's MLA
           # `torch.bmm(..., out=view)`, GB0242), a user class built with
           # `object.__new__` (SGLang's residual-stream records, GB2404), a
           # tensor's address as an int (`int(t.data_ptr())` in FlashInfer's
           # CuTe pointers, GB3775), `==` on objects Dynamo keeps opaque
           # (CuTe DSL's argument checks, GB9648).
           Rule(gb_ids=frozenset({"GB9137", "GB0055", "GB0207", "GB0242", "GB2404", "GB3775", "GB9648"})),
           # A builtin whose handler in Dynamo takes no such arguments
           # (`min(table.keys(), key=lambda k: ...)`, GB0193).
           Rule(gb_ids=frozenset({"GB0193"}), advice="builtin-arguments"),),
    advice="precompute-builtin",
    ladder=("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    priority=70,
)
