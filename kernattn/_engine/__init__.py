"""The Nadaraya–Watson engine shared by the estimators.

``heads`` holds the fitted kernels (softmax heads, compact kernels); ``regressor`` the engine
estimator (validation, the fit transaction, prediction through the reduction,
``attention_weights``, the diagnostics); ``moments`` a head's estimate and spread and the
mixture of the heads (``return_std``); ``labels`` its counterpart over class labels;
``inference`` intervals and marginal effects; ``distribution`` conditional distributions and
conformal intervals, whose public methods ``conditional`` holds; ``summary`` row summaries
for searches on subsets. The engine knows nothing of Dask: an out-of-core backend registers
itself in :mod:`kernattn._core.rows`.
"""
