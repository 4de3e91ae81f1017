"""forbidden-call: a function torch forbids inside a graph, called from the
traced code (``torch._dynamo.mark_static_address``, ``mark_dynamic``).

Dynamo stops on it with an AssertionError in every mode, so a plain
``torch.compile`` fails there too; capture/exceptions.py names the failure
by the mark the function carries.
"""

from graphbreak_doctor.analysis.categories.category import Category, Rule
from graphbreak_doctor.capture.exceptions import FORBIDDEN

CATEGORY = Category(
    name="forbidden-call",
    why="a function torch forbids in a compiled graph (it marks inputs before compiling)",
    evidence="a function torch marks `forbid_in_graph` (`torch._dynamo.mark_static_address`, `mark_dynamic`)",
    rules=(Rule(exceptions=(FORBIDDEN,)),),
    advice="skip-when-compiling",
    ladder=("skip-when-compiling",),
    priority=15,
)
