"""cudagraph-rng: inside a captured CUDA-graph segment a random operator
draws from a CUDA generator the capture does not know -- not the device's
default generator, and not registered with the graph. On a GPU torch refuses
it during capture (the generator's Philox state cannot advance at replay).
Found by the CUDA-graph recorder, never by Dynamo."""

from graphbreak_doctor.analysis.categories.category import Category

CATEGORY = Category(
    name="cudagraph-rng",
    why="a random operator inside a captured CUDA-graph segment uses a generator the graph does not know",
    evidence="inside a captured segment: a random operator with `generator=` a CUDA generator that is not the "
             "default one and not `register_generator_state`d",
    rules=(),
    advice="register-generator",
    ladder=(),
    priority=92,
)
