"""data-dependent: control flow or output shapes that depend on tensor values.

Under fullgraph Dynamo reports some of these as capture failures that are not
``Unsupported``: a guard on a data-dependent expression (``if x.sum().item() > 0``
raises UserError from GuardOnDataDependentSymNode), a dynamic dimension the
code specializes (ConstraintViolationError), conflicting ``torch._check``
ranges (ValueRangeError). They have no registry id; their exception types
are the evidence.
"""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="data-dependent",
    why="control flow or output shape depends on tensor values or on a dynamic size",
    evidence="tensor-valued `if`, dynamic output shapes, guards on data-dependent or dynamic sizes",
    rules=(
        # A size marked dynamic that the code specializes: its own advice.
        Rule(exceptions=("torch.fx.experimental.symbolic_shapes.ConstraintViolationError",
                         "torch._dynamo.exc.UserErrorType.DYNAMIC_DIM"),
             advice="keep-size-dynamic"),
        # Data-dependent branching (GB0170, GB0035), dynamic shape operators
        # (GB0036, GB0037), data dependent operator (GB0033), Tensor.item()
        # (GB0124), Tensor.tolist() (GB0109), data-dependent assertion (GB0034),
        # one_hot with a data-dependent shape (GB0246).
        Rule(gb_ids=frozenset({"GB0170", "GB0035", "GB0036", "GB0037", "GB0033", "GB0124", "GB0109", "GB0034",
                               "GB0246"}),
             exceptions=("torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
                         "torch.fx.experimental.symbolic_shapes.PendingUnbackedSymbolNotFound",
                         "torch.utils._sympy.value_ranges.ValueRangeError",
                         "torch._dynamo.exc.UserErrorType.DYNAMIC_CONTROL_FLOW",
                         "torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION")),
    ),
    advice="static-control-flow",
    # In the traced code itself this needs a human (torch.cond); inside a
    # library function the whole call can become one op.
    ladder=("use-registered-op", "wrap-custom-op"),
    priority=20,
)
