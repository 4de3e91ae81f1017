"""The compatibility matrix: which SGLang x FlashInfer x GPU combinations
capture GLM-5's layers (or a provider's own targets). envs.py creates one
environment per version pair, run.py runs the cells (and bisection) in worker
processes of those environments, executors/ says where; the result
(graphbreak_doctor.model.matrix) is what the renderers read."""
