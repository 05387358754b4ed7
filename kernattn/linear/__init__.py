r"""Linear attention: Nadaraya–Watson regression in time linear in the data.

The kernel is replaced by an explicit feature map, :math:`\kappa(q, k) = \phi(q)^\top\phi(k)`,
so the estimate is

.. math::

    \hat y(q) = \frac{\phi(q)^\top S}{\phi(q)^\top z}, \qquad
    S = \sum_i s_i \phi(k_i)\, y_i^\top, \quad z = \sum_i s_i \phi(k_i),

and the training set enters only through the sums :math:`S, z` (and :math:`S_2`, the same
with :math:`y_i^2`, for ``return_std``), accumulated in one pass that can be split into
chunks. :class:`LinearAttentionRegressor` (in ``_regressor``) sets up the softmax kernel being
approximated and fits the feature maps; the fitted kernel, the feature sums and the rows they
cannot serve are in ``_feature_kernel``; the split kernel that computes each query's near keys
exactly and the rest from per-cell feature sums is in ``_near_field``; the leave-one-out
objective of a learned input projection is in ``_projection``; the measurement of the near
field's error and the searches of its size and of the far field's rank in ``_near_search``,
the cost model that weighs the split against the exact weights in ``_cost``; the two passes
of a fit over training rows in parts (chunks from disk, :func:`fit_chunks`, or the partitions
of a Dask collection) in ``_passes``.
"""

from kernattn.linear._fallback import ExactFallbackWarning, NotLinearTimeWarning
from kernattn.linear._regressor import LinearAttentionRegressor, fit_chunks

__all__ = [
    "ExactFallbackWarning",
    "LinearAttentionRegressor",
    "NotLinearTimeWarning",
    "fit_chunks",
]
