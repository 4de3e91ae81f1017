"""other: no rule recognised the break; shown with Dynamo's raw reason."""

from graphbreak_doctor.analysis.categories.category import Category

CATEGORY = Category(
    name="other",
    why="a graph break no rule recognized",
    evidence="anything else, shown with Dynamo's raw reason",
    rules=(),
    advice="read-raw-reason",
    ladder=("use-registered-op", "compiler-disable", "wrap-custom-op"),
    priority=1000,
)
