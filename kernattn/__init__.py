"""kernattn: attention as a kernel smoother.

Every estimator here predicts with the Nadaraya–Watson estimate
``ŷ(x) = Σ_i w_i(x) y_i``, ``w_i(x) = κ(x, x_i) / Σ_j κ(x, x_j)`` — a soft dictionary lookup
with the query ``x``, the training inputs as keys and the targets as values. They differ in
the kernel κ: a fixed smoothing kernel (:class:`KernelSmoother`), a learned dot-product
kernel (:class:`AttentionRegressor`), or an explicit random-feature map
(:class:`LinearAttentionRegressor`).
"""

# ``kernattn.compare`` is a callable module: ``kernattn.compare(...)`` runs the comparison and
# ``import kernattn.compare`` gives the same object.
from kernattn import compare, datasets, feature_maps, metrics, plotting
from kernattn._core.warning_types import BandwidthWarning, LocalDesignWarning
from kernattn.attention import linear_attention, softmax_attention
from kernattn.compare import ComparisonResult
from kernattn.learned import AttentionClassifier, AttentionRegressor
from kernattn.linear import LinearAttentionRegressor, fit_chunks
from kernattn.smoother import (
    KernelClassifier,
    KernelSmoother,
    SignificanceResult,
    significance_test,
)

# The Dask backend registers itself here (dask is imported only when a collection arrives).
from kernattn import distributed  # noqa: E402, F401  isort: skip

__version__ = "0.8.0.dev0"

__all__ = [
    "AttentionClassifier",
    "AttentionRegressor",
    "BandwidthWarning",
    "ComparisonResult",
    "KernelClassifier",
    "KernelSmoother",
    "LinearAttentionRegressor",
    "LocalDesignWarning",
    "SignificanceResult",
    "compare",
    "datasets",
    "feature_maps",
    "fit_chunks",
    "linear_attention",
    "metrics",
    "plotting",
    "significance_test",
    "softmax_attention",
    "__version__",
]
