"""The Nadaraya–Watson engine shared by the estimators.

``heads`` holds the fitted kernels (softmax heads, compact kernels); ``regressor`` the engine
estimator (validation, the fit transaction, prediction through the reduction, the head
mixture, ``return_std``, ``attention_weights``); ``labels`` its counterpart over class labels;
``inference`` intervals and marginal effects; ``distribution`` conditional distributions and
conformal intervals; ``summary`` row summaries for searches on subsets. The engine knows
nothing of Dask.
"""
