"""Nadaraya–Watson classification: attention over labelled keys.

The class probabilities at a query are the weights' class sums, the Nadaraya–Watson estimate
of the one-hot codes of the labels, smoothed toward the class frequencies
(:mod:`~kernattn.classify._labels`). :class:`KernelClassifier` takes its weights from the
Gaussian product kernel of :class:`~kernattn.KernelSmoother` with bandwidths chosen by
likelihood cross-validation (:mod:`~kernattn.classify._likelihood`);
:class:`AttentionClassifier` from multi-head attention learned on the leave-one-out log-loss
(neighbourhood components analysis in log form).
"""

from kernattn.classify._attention import AttentionClassifier
from kernattn.classify._kernel import KernelClassifier

__all__ = ["AttentionClassifier", "KernelClassifier"]
