"""Local fits on kernel weights: one local-polynomial design and solve, the held-back rule,
the closed-form local-linear fit from kernel moments, the fitted local-polynomial objects,
and the tilt and warp of learned kernels. Pure mathematics on weights and keys; nothing here
knows an estimator.
"""
