r"""Linear attention: Nadaraya–Watson regression in time linear in the data.

The kernel is replaced by an explicit feature map, :math:`\kappa(q, k) = \phi(q)^\top\phi(k)`,
so the estimate is

.. math::

    \hat y(q) = \frac{\phi(q)^\top S}{\phi(q)^\top z}, \qquad
    S = \sum_i s_i \phi(k_i)\, y_i^\top, \quad z = \sum_i s_i \phi(k_i),

and the training set enters only through the sums :math:`S, z` (and :math:`S_2`, the same
with :math:`y_i^2`, for ``return_std``), accumulated in one pass that can be split into
chunks. :class:`LinearAttentionRegressor` (in ``_regressor``) holds the parameters, their
validation and the order of the steps; the kernel's making (heads, bandwidth, feature maps,
learned projection) is ``_recipe``; the fitted kernel, the feature sums and the rows they
cannot serve are in ``_feature_kernel``, the warnings about those rows in ``_fallback``; the
split kernel that computes each query's near keys exactly and the rest from per-cell feature
sums, and its prediction cell by cell, is in ``_near_field``; the leave-one-out objective of
a learned input projection is in ``_projection``; the measurement of the near field's error
and the searches of its size and of the far field's rank in ``_near_search``, their run on
an in-memory training set in ``_split_fit``, the cost model that weighs the split against
the exact weights in ``_cost``; the two passes of a fit over training rows in parts (chunks
from disk, :func:`fit_chunks`, or the partitions of a Dask collection) in ``_passes``, and
the estimator's fits that keep no keys (``partial_fit`` and those in parts) in
``_in_parts``; ``attention_weights`` in ``_weights``; the prediction in stages of a model
whose keys stay on a cluster in ``_staged``.
"""

from kernattn.linear._fallback import ExactFallbackWarning, NotLinearTimeWarning
from kernattn.linear._regressor import LinearAttentionRegressor, fit_chunks

__all__ = [
    "ExactFallbackWarning",
    "LinearAttentionRegressor",
    "NotLinearTimeWarning",
    "fit_chunks",
]
