"""The compatibility matrix: which SGLang x FlashInfer x GPU combinations
capture GLM-5's layers. envs.py builds one environment per version pair,
run.py runs the cells (and bisection) in worker processes of those
environments, result.py is what the renderers read (render/matrix_*.py)."""
