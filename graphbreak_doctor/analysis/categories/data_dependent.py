"""data-dependent: control flow or output shapes that depend on tensor values."""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="data-dependent",
    why="control flow or output shape depends on tensor values",
    evidence="tensor-valued `if`, dynamic output shapes",
    rules=(Rule(gb_types=frozenset({
        "Data-dependent branching", "Data-dependent branching with non-constant __bool__",
        "Dynamic shape operator", "Dynamic shape operator (no meta kernel)",
        "Unsupported Tensor.item() call with capture_scalar_outputs=False",
        "Tensor.tolist() with non-integer tensor",
        "Data-dependent assertion failed (cannot compile partial graph)",
        "Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape"})),),
    advice="static-control-flow",
    # In the traced code itself this needs a human (torch.cond); inside a
    # library function the whole call can become one op.
    ladder=("use-registered-op", "wrap-custom-op"),
    priority=20,
)
