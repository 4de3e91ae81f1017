"""logging: ``logging``, ``print`` and ``warnings`` on the traced path."""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="logging",
    why="logging, printing or warnings",
    evidence="`logging`, `print`, `warnings`",
    # GB0291: "logging.Logger method not supported for non-export cases".
    rules=(Rule(gb_ids=frozenset({"GB0291"}),
                through=("logging", "warnings"),
                culprits=("builtins.print", "print", "_warnings.warn", "warnings.warn", "logging.")),),
    advice="guard-logging",
    # Inside a function that neither takes nor returns tensors (a package
    # availability check that logs what it found) the function runs once
    # before capture; a logging.Logger call anywhere else Dynamo can be told
    # to skip while compiling (print and warnings need a human: a guard);
    # inside a library function the whole call can become one op.
    ladder=("use-registered-op", "hoist-call", "ignore-logging-call", "wrap-custom-op"),
    priority=50,
)
