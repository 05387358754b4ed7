r"""Explicit feature maps for linear attention: :math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)`.

With a feature map the Nadaraya–Watson estimate factorises,

.. math::

    \hat y(q) = \frac{\phi(q)^\top S}{\phi(q)^\top z}, \qquad
    S = \sum_i \phi(k_i)\, y_i^\top, \quad z = \sum_i \phi(k_i),

so the sums over the keys are taken once, in one pass that can be split into chunks (see
:func:`kernattn.attention.linear_attention`).

Every map is a :class:`FeatureMap`: a small scikit-learn-style object, fitted with
``fit(keys, *, queries=None, sample_weight=None, random_state=None)`` and applied with
``transform(U)``. Its class attributes say which kernel it estimates (``approximates``),
whether its features can be negative (``signed``), whether they are random draws
(``random``) and whether it can be evaluated in log space (``log_domain``).

- :class:`PositiveRandomFeatures`: :math:`\phi(u) = \exp(\Omega u - \|u\|^2/2)/\sqrt r`,
  unbiased for the softmax kernel :math:`\exp(q^\top k)` (Choromanski et al., 2021;
  ``hyperbolic=True``: the pairs :math:`e^{\pm\Omega u}`, same kernel, lower variance;
  ``A < 0`` or ``A="optimal"``: generalised features that damp large frequencies, far lower
  variance for inputs of large norm, Likhosherstov et al., 2022);
- :class:`TrigonometricRandomFeatures`:
  :math:`\phi(u) = [\cos \Omega u, \sin \Omega u]/\sqrt{r/2}`,
  unbiased for the Gaussian kernel :math:`\exp(-\|q - k\|^2/2)` (Rahimi & Recht, 2007);
- :class:`NystroemFeatures`: the Gaussian kernel's values at m landmarks taken from the keys,
  :math:`a(u)_j = \exp(-\|u - l_j\|^2/2)`, combined through the pseudo-inverse of the
  landmarks' kernel matrix (Williams & Seeger, 2001): deterministic once the landmarks are
  chosen, and accurate where the bandwidth is small next to the spread of the data, where
  random features are not;
- :class:`EluFeatureMap` (:math:`\mathrm{elu}(u) + 1`) and :class:`ReluFeatureMap`
  (:math:`\max(u, 0)`): deterministic maps that define their own kernel.

The rows :math:`\omega_j` of :math:`\Omega` are standard normal; with ``orthogonal=True``
(the default) they come in blocks of mutually orthogonal rows whose norms are drawn from the
chi distribution with :math:`d` degrees of freedom, so each row is still marginally
:math:`N(0, I)` (the estimates stay unbiased) but the rows of a block are no longer
independent, which lowers the variance.

**Variance.** The positive estimate of :math:`\exp(q^\top k)` is a mean of log-normal terms
:math:`\exp(\omega^\top(q + k) - \|q + k\|^2/2)\,\exp(q^\top k)` whose relative variance is
:math:`(\exp(\|q + k\|^2) - 1)/r`: it is accurate only for inputs of small norm. Callers
center and scale the inputs first (``LinearAttentionRegressor`` does). The trigonometric
estimate has bounded absolute error :math:`O(r^{-1/2})` but can be negative.

:func:`make_feature_map` builds a map from its name (``FEATURE_MAPS``),
:func:`check_feature_map` validates a ``feature_map`` parameter, and
:func:`kernel_approximation_error` measures how well a map reproduces its kernel.

References
----------
- A. Rahimi, B. Recht, "Random features for large-scale kernel machines", NeurIPS 2007.
- C. K. I. Williams, M. Seeger, "Using the Nyström method to speed up kernel machines",
  NeurIPS 2001.
- F. X. Yu et al., "Orthogonal random features", NeurIPS 2016.
- A. Katharopoulos et al., "Transformers are RNNs: fast autoregressive transformers with
  linear attention", ICML 2020.
- K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
- V. Likhosherstov et al., "Chefs' random tables: non-trigonometric random features",
  NeurIPS 2022.
"""

from kernattn.feature_maps._base import FeatureMap
from kernattn.feature_maps._deterministic import EluFeatureMap, ReluFeatureMap
from kernattn.feature_maps._error import kernel_approximation_error
from kernattn.feature_maps._factory import FEATURE_MAPS, check_feature_map, make_feature_map
from kernattn.feature_maps._nystroem import NystroemFeatures
from kernattn.feature_maps._random import (
    PositiveRandomFeatures,
    TrigonometricRandomFeatures,
    gaussian_rows,
    optimal_positive_parameter,
)

__all__ = [
    "FEATURE_MAPS",
    "EluFeatureMap",
    "FeatureMap",
    "NystroemFeatures",
    "PositiveRandomFeatures",
    "ReluFeatureMap",
    "TrigonometricRandomFeatures",
    "check_feature_map",
    "gaussian_rows",
    "kernel_approximation_error",
    "make_feature_map",
    "optimal_positive_parameter",
]
