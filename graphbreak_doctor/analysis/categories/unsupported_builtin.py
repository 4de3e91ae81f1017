"""unsupported-builtin: builtins, stdlib objects and runtime APIs Dynamo cannot model."""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="unsupported-builtin",
    why="a builtin, stdlib object or runtime API Dynamo cannot model",
    evidence="`SimpleNamespace`, `datetime.now`, locks",
    # Locks and generator-based context managers (FlashInfer's autotuner
    # `with self._lock:`), a `class` statement executed on the traced path
    # (LOAD_NAME has no handler), and torch runtime APIs Dynamo skips on
    # purpose (torch.cuda.use_mem_pool).
    rules=(Rule(gb_types=frozenset({"Unsupported context manager", "Missing bytecode handler",
                                    "Invalid call to __build_class__",
                                    "can't handle functions not implemented in python"}),
                culprits=("torch.cuda.", "torch._utils.", "torch._C."),
                stdlib_culprit=True),),
    advice="precompute-builtin",
    ladder=("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    priority=70,
)
