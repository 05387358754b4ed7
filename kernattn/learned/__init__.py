"""Nadaraya–Watson regression with a learned multi-head attention kernel.

:class:`AttentionRegressor` learns the projections (and the mixture of the heads) of a
softmax attention kernel by minimizing the leave-one-out error, then predicts with the
shared Nadaraya–Watson engine. The objective and its gradient live in ``_objective``, the
optimizers and the initialization in ``_optimize``, the local lines and tilted weights in
``_local``, and the inner validation of how far the trained kernel moves from its start
in ``_shrinkage``. :class:`AttentionClassifier` (``_classifier``) learns the same kernel for
class probabilities, on the leave-one-out log-loss (``_likelihood``).
"""

from kernattn.learned._classifier import AttentionClassifier
from kernattn.learned._regressor import AttentionRegressor

__all__ = ["AttentionClassifier", "AttentionRegressor"]
