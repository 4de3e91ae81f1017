"""other: no rule recognised the break; shown with Dynamo's raw reason."""

from graphbreak_doctor.analysis.categories.category import Category

CATEGORY = Category(
    name="other",
    why="a graph break no rule recognized",
    evidence="anything else, shown with Dynamo's raw reason",
    rules=(),
    advice="read-raw-reason",
    # A break no rule knows, inside a module-level function that neither takes
    # nor returns tensors (a platform probe whose import fails), is one a
    # warm-up before capture removes, as for the known categories.
    # One Dynamo names a switch for (an RNN module: allow_rnn) gets the switch;
    # a torch check whose message Dynamo cannot convert keeps the check and
    # loses the message under torch.compile.
    ladder=("allow-rnn", "check-without-message", "use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    priority=1000,
)
