"""The classical Nadaraya–Watson smoother with a fixed kernel and a chosen bandwidth.

:class:`KernelSmoother` for regression, :class:`KernelClassifier` for class probabilities
over the same weights, and :func:`significance_test` for whether a feature matters. The
binned tier for one or two inputs lives in ``_binned``.
"""

from kernattn.smoother._classifier import KernelClassifier
from kernattn.smoother._regressor import KernelSmoother
from kernattn.smoother._significance import SignificanceResult, significance_test

__all__ = ["KernelClassifier", "KernelSmoother", "SignificanceResult", "significance_test"]
