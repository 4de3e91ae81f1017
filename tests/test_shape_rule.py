"""A custom op's fake inferred from warm-up calls as a shape rule
(graphbreak_doctor/recipes/shape_rule.py): it answers shapes no warm-up
call had, a symbolic one too, where a table of the seen shapes cannot."""

from __future__ import annotations

import torch

from graphbreak_doctor.recipes import shape_rule


def _calls(fn, *shapes):
    out = []
    for shape in shapes:
        x = torch.randn(*shape)
        out.append(({"x": x, "scale": 2.0}, fn(x, 2.0)))
    return out


def test_output_dims_follow_the_inputs_or_stay_constant():
    def pooled(x, scale):
        return (x[..., :16] * scale).contiguous(), x.sum(-1)

    rule = shape_rule.infer(_calls(pooled, (4, 64), (8, 64)), ["x", "scale"])
    assert rule == ("tuple", (("tensor", (("x", 0), 16), "float32"), ("tensor", (("x", 0),), "float32")))
    made = shape_rule.make(rule, {"x": torch.empty(5, 64), "scale": 2.0})
    assert [tuple(t.shape) for t in made] == [(5, 16), (5,)]
    assert shape_rule.describe(rule, ["x", "scale"]) == (
        "x.new_empty((x.shape[0], 16), dtype=torch.float32), x.new_empty((x.shape[0],), dtype=torch.float32)")


def test_one_call_prefers_the_inputs_dimension_to_a_constant():
    rule = shape_rule.infer(_calls(lambda x, s: x * s, (8, 2048)), ["x", "scale"])
    assert rule == ("tensor", (("x", 0), ("x", 1)), "float32")


def test_no_rule_where_a_dimension_follows_nothing_or_an_output_is_not_contiguous():
    assert shape_rule.infer(_calls(lambda x, s: x.new_empty(x.shape[0] * 2), (4, 3), (8, 3)), ["x", "scale"]) is None
    assert shape_rule.infer(_calls(lambda x, s: x.t(), (4, 3), (8, 3)), ["x", "scale"]) is None
    assert shape_rule.infer([], ["x"]) is None


def test_a_custom_op_with_the_rule_as_its_fake_compiles_with_a_dynamic_dimension():
    """Dynamo keeps the token dimension symbolic (as a server's dynamic
    compile does): the rule answers it, at sizes no warm-up call had."""
    def scaled(x, scale):
        return x * scale

    rule = shape_rule.infer(_calls(scaled, (8, 32)), ["x", "scale"])

    @torch.library.custom_op("graphbreak_doctor_test::rule_scaled", mutates_args=())
    def op(x: torch.Tensor, scale: float) -> torch.Tensor:
        return scaled(x, scale)

    @op.register_fake
    def _(x, scale):
        return shape_rule.make(rule, {"x": x, "scale": scale})

    compiled = torch.compile(lambda x: op(x, 3.0) + 1, fullgraph=True, dynamic=True, backend="eager")
    for tokens in (3, 17, 64):
        x = torch.randn(tokens, 32)
        torch.testing.assert_close(compiled(x), x * 3.0 + 1)


def test_the_dtype_follows_the_argument_that_asks_for_it():
    """A kernel that takes its output dtype: warmed up at bf16 only, its
    fake still answers the dtype a caller asks for (torch's own check of a
    fake against the real op agrees), and the rule says so in a patch."""
    def project(x, in_dtype, out_dtype):
        return (x.to(in_dtype) * 2).to(out_dtype)

    calls = [({"x": x, "in_dtype": torch.bfloat16, "out_dtype": torch.bfloat16},
              project(x, torch.bfloat16, torch.bfloat16)) for x in (torch.randn(4, 8), torch.randn(6, 8))]
    rule = shape_rule.infer(calls, ["x", "in_dtype", "out_dtype"])
    assert rule == ("tensor", (("x", 0), ("x", 1)), ("out_dtype",))
    assert shape_rule.describe(rule, ["x", "in_dtype", "out_dtype"]) == \
        "x.new_empty((x.shape[0], x.shape[1]), dtype=out_dtype)"

    @torch.library.custom_op("graphbreak_doctor_test::rule_project", mutates_args=())
    def op(x: torch.Tensor, in_dtype: torch.dtype, out_dtype: torch.dtype) -> torch.Tensor:
        return project(x, in_dtype, out_dtype)

    @op.register_fake
    def _(x, in_dtype, out_dtype):
        return shape_rule.make(rule, {"x": x, "in_dtype": in_dtype, "out_dtype": out_dtype})

    for out_dtype in (torch.float16, torch.float32):
        torch.library.opcheck(op, (torch.randn(3, 8), torch.bfloat16, out_dtype))
    # Outputs of different dtypes that no argument names: no rule.
    mixed = [({"x": x}, x.to(dtype)) for x, dtype in ((torch.randn(2), torch.float16), (torch.randn(2), torch.float32))]
    assert shape_rule.infer(mixed, ["x"]) is None


def test_a_size_read_from_the_values_is_left_unbacked_for_a_data_dependent_wrap():
    """A length regulator: each row repeated as often as ``counts`` says. The
    warm-up's row count is no constant: the fake leaves it to the op's
    result, so the compiled call holds for counts the warm-up never saw."""
    def regulate(x, counts):
        return torch.repeat_interleave(x, counts, dim=0)

    x, counts = torch.randn(3, 4), torch.tensor([1, 2, 2])
    calls = [({"x": x, "counts": counts}, regulate(x, counts))]
    assert shape_rule.infer(calls, ["x", "counts"]) == ("tensor", (5, ("x", 1)), "float32")
    rule = shape_rule.infer(calls, ["x", "counts"], data_sizes=True)
    assert rule == ("tensor", (shape_rule.UNBACKED, ("x", 1)), "float32") and shape_rule.unbacked(rule)
    assert "new_dynamic_size()" in shape_rule.describe(rule, ["x", "counts"])

    @torch.library.custom_op("graphbreak_doctor_test::regulate", mutates_args=())
    def op(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return regulate(x, counts)

    op.register_fake(lambda x, counts: shape_rule.make(rule, {"x": x, "counts": counts}))
    def fn(x, c):
        out = op(x, c)
        # A size the graph holds as a number: a constant fake bakes in 5.
        return out.sum(1) + torch.arange(out.shape[0])

    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    try:
        for other in (counts, torch.tensor([3, 0, 4])):
            want = regulate(x, other)
            assert torch.equal(compiled(x, other), want.sum(1) + torch.arange(want.shape[0]))
    finally:
        torch._dynamo.reset()
