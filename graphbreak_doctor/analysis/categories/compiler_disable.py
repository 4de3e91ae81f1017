"""compiler-disable: a ``torch.compiler.disable``d function on the traced path.

Under ``fullgraph=True`` a disabled function is an error, not a way out.
"""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="compiler-disable",
    why="Dynamo met a function wrapped in torch.compiler.disable",
    evidence="a `torch.compiler.disable`d function",
    # "Skip calling / Skip inlining `torch.compiler.disable()`d function".
    rules=(Rule(gb_ids=frozenset({"GB0098", "GB0099"})),),
    advice="custom-op-instead-of-disable",
    ladder=("wrap-custom-op",),
    priority=10,
)
