r"""``LinearAttentionRegressor``: Nadaraya–Watson regression in time linear in the data.

The kernel is replaced by an explicit feature map, :math:`\kappa(q, k) = \phi(q)^\top\phi(k)`,
so the estimate is

.. math::

    \hat y(q) = \frac{\phi(q)^\top S}{\phi(q)^\top z}, \qquad
    S = \sum_i s_i \phi(k_i)\, y_i^\top, \quad z = \sum_i s_i \phi(k_i),

and the training set enters only through the sums :math:`S, z` (and :math:`S_2`, the same
with :math:`y_i^2`, for ``return_std``). Fit and prediction cost O(n r p) for r features
of p-dimensional queries; the sums can be accumulated chunk by chunk (``partial_fit``).

Every kernel here is a softmax kernel :math:`\exp(q^\top k + b_k)` of projected inputs, up to
factors of the query alone (which cancel in the ratio):

- the Gaussian kernel with bandwidth :math:`h` (the default): :math:`q = (x - c)/h`,
  :math:`k = (x_i - c)/h`, :math:`b_k = -\|k\|^2/2`, since
  :math:`-\tfrac12\|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2`;
- the heads of an ``AttentionRegressor`` (its projections, temperature and similarity).

How the kernel is set up from the data is in :mod:`kernattn._linear_kernels`. The key factor
:math:`e^{b_k}` is folded into the key features. Numerics (see :mod:`kernattn._linear_sums`):
log-features with a per-query maximum and one global key-side
constant subtracted, and queries whose denominator is not safely positive computed exactly.
"""

import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted

from kernattn._linear_kernels import ATTENTION_CONTRACT, LinearKernelMixin
from kernattn.feature_maps import FEATURE_MAPS, PositiveRandomFeatures, make_feature_map
from kernattn.smoother import KernelSmoother


class LinearAttentionRegressor(LinearKernelMixin):
    r"""Random-feature linear attention: a Nadaraya–Watson regressor linear in n.

    Approximates the Nadaraya–Watson estimate of a softmax kernel with a feature map
    (Choromanski et al., 2021; Katharopoulos et al., 2020),

    .. math::

        \hat y(x) = \frac{\phi(q)^\top \sum_i s_i \phi(k_i) y_i}
                         {\phi(q)^\top \sum_i s_i \phi(k_i)},

    so that the training set is summarised once, in O(n r p), and each prediction costs
    O(r p) instead of O(n p).

    **Which kernel.** By default the Gaussian kernel of :class:`~kernattn.KernelSmoother`, with
    ``bandwidth`` meaning exactly what it means there: queries and keys are the inputs,
    centred and divided by the bandwidth, and the Gaussian kernel is
    :math:`\exp(q^\top k) \cdot e^{-\|k\|^2/2} \cdot e^{-\|q\|^2/2}` — the key factor is
    folded into the key features, the query factor cancels. With ``kernel`` an
    ``AttentionRegressor`` (or ``"attention"``), its learned heads are used instead: a
    fitted one as it is, an unfitted one fitted inside ``fit`` on a random subsample of at
    most ``n_subsample`` rows — learn the kernel where n is small, apply it in linear time
    where n is large. With ``learn_projection=True`` the Gaussian kernel's input map
    :math:`P` (``u = Pᵀ(x − c)``, started at ``diag(1/h)``) is trained through the
    feature map itself on the leave-one-out loss, whose sums :math:`S - s_i\phi(k_i)y_i^\top`
    and :math:`z - s_i\phi(k_i)` keep it linear in n (on at most ``n_subsample`` rows).

    **Centre and scale.** The positive features estimate :math:`\exp(q^\top k)` with
    relative variance :math:`(\exp(\|q + k\|^2) - 1)/r`: it grows like
    :math:`\exp(\|q\|^2 + \|k\|^2)` with the norms of the inputs in kernel units. The inputs
    are therefore centred (``centre``, the weighted mean by default), and random features
    are accurate only where the bandwidth is not small compared with the spread of the data
    — a large bandwidth, few input dimensions, or both. With a small bandwidth their estimate
    stays finite and inside the range of the targets, but it is a different, coarser
    smoother. ``feature_map="nystroem"`` does not have this limit: its r features are the
    kernel's values at r landmarks chosen from the training keys (k-means centres), so
    they resolve the kernel wherever the data are. In
    ``examples/benchmarks/bench_linear.py`` (d = 8, leave-one-out bandwidth, r = 256) the
    test MSE is about 80 % above the exact smoother's with positive features, about 30 %
    with ``feature_map="optimal"`` and within 2 % with ``feature_map="nystroem"``, at the
    same linear cost.

    **Numerics.** Query log-features have their row maximum subtracted, key log-features one
    global constant (both cancel in the ratio); never a per-key constant, which would not.
    A query whose denominator :math:`\phi(q)^\top z` is not safely positive (signed
    trigonometric, Nyström or relu features, or underflow far from every key), or that lies
    more than 6 kernel units from every Nyström landmark, is computed exactly with the
    kernel being approximated, and a ``UserWarning`` says how many; after
    ``partial_fit`` the keys are not kept, so those queries get the weighted mean of the
    training targets instead (also warned). Never NaN.

    Parameters
    ----------
    feature_map : {"positive", "hyperbolic", "optimal", "trig", "nystroem", "elu", "relu"} \
or object, default="positive"
        Positive random features (FAVOR+), their hyperbolic variant, generalised positive
        features with the variance-optimal parameter for the training data's
        :math:`\overline{\|q + k\|^2}` (lower variance at small bandwidths), random
        Fourier features, Nyström features (the kernel at landmarks chosen from at most
        ``n_subsample`` training keys; signed, deterministic once chosen), elu + 1, relu
        (see :mod:`kernattn.feature_maps`), or an unfitted feature-map object (copied and
        fitted per head; one whose ``fit`` takes ``keys`` is given the projected keys of
        at most ``n_subsample`` training rows).
    n_features : int, default=256
        r, the number of random features or landmarks (named maps only).
    orthogonal : bool, default=True
        Orthogonal blocks of random frequencies (lower variance; named maps only).
    bandwidth : float, array_like of shape (n_features_in_,), or {"scott", "silverman", \
"loo"}, default="scott"
        As in :class:`~kernattn.KernelSmoother`. ``"loo"`` minimises the exact leave-one-out
        error, O(n²): on more than ``n_subsample`` rows it is run on a random subsample of
        ``n_subsample`` rows and the bandwidth rescaled by Scott's factor
        :math:`(n_{\mathrm{sub}}/n)^{1/(d+4)}`. Ignored when ``kernel`` is an
        ``AttentionRegressor``.
    centre : array_like of shape (n_features_in_,), optional
        Subtracted from the inputs; default the weighted mean of the training inputs (of
        the first chunk, with ``partial_fit``). Ignored when ``kernel`` is an
        ``AttentionRegressor`` (its ``x_mean_`` is used).
    kernel : "gaussian", "attention" or AttentionRegressor, default="gaussian"
        The softmax kernel being approximated, see above.
    learn_projection : bool, default=False
        Train the Gaussian kernel's input map through positive features (Gaussian kernel
        and positive, hyperbolic or optimal features only).
    n_subsample : int, default=2000
        Most rows used for what costs more than linear time (the "loo" bandwidth, fitting an
        AttentionRegressor, training the projection) or needs only a sample (choosing
        Nyström landmarks).
    random_state : int, RandomState or None, default=None
        Draws the features (once, in ``fit``) and the subsamples.

    Attributes
    ----------
    centre_ : ndarray of shape (n_features_in_,)
    bandwidth_ : ndarray of shape (n_features_in_,)
        Gaussian kernel only.
    query_projection_, key_projection_ : ndarray of shape (n_heads, n_features_in_, p)
        ``q = (x − centre_) @ query_projection_[h]`` (then normalised for cosine similarity,
        divided by the square root of ``temperature_[h]`` and shifted by ``key_shift_[h]``).
    key_shift_ : ndarray of shape (n_heads, p)
    temperature_, head_weights_ : ndarray of shape (n_heads,)
    head_bias_ : ndarray of shape (n_outputs,)
    similarity_ : str
    feature_maps_ : list of fitted feature maps, one per head
    attention_model_ : AttentionRegressor
        The one whose heads are used (``kernel`` other than "gaussian").
    loo_error_ : float
        Leave-one-out error reached (``bandwidth="loo"`` or ``learn_projection=True``).
    X_fit_, y_fit_, sample_weight_ : ndarray
        The training set, after ``fit`` only: ``partial_fit`` keeps the sums, not the keys,
        so ``attention_weights`` is not available after it.
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    See Also
    --------
    kernattn.KernelSmoother : the exact Gaussian smoother this approximates by default.
    kernattn.AttentionRegressor : exact attention with a learned kernel.
    kernattn.feature_maps : the feature maps.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
    .. [2] A. Katharopoulos et al., "Transformers are RNNs", ICML 2020.
    .. [3] A. Rahimi, B. Recht, "Random features for large-scale kernel machines", 2007.
    .. [4] C. K. I. Williams, M. Seeger, "Using the Nyström method to speed up kernel
       machines", NeurIPS 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import KernelSmoother, LinearAttentionRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, (500, 2))
    >>> y = X[:, 0] + np.sin(2 * X[:, 1])
    >>> linear = LinearAttentionRegressor(n_features=4096, bandwidth=1.0, random_state=0)
    >>> exact = KernelSmoother(bandwidth=1.0)
    >>> gap = linear.fit(X, y).predict(X[:5]) - exact.fit(X, y).predict(X[:5])
    >>> bool(np.abs(gap).max() < 0.05)
    True
    """

    def __init__(
        self,
        feature_map="positive",
        n_features=256,
        orthogonal=True,
        bandwidth="scott",
        centre=None,
        kernel="gaussian",
        learn_projection=False,
        n_subsample=2000,
        random_state=None,
    ):
        self.feature_map = feature_map
        self.n_features = n_features
        self.orthogonal = orthogonal
        self.bandwidth = bandwidth
        self.centre = centre
        self.kernel = kernel
        self.learn_projection = learn_projection
        self.n_subsample = n_subsample
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # scikit-learn's training-score check fits 10 standardised features at Scott's
        # bandwidth, where the exact smoother scores by (nearly) memorising each point; a
        # few hundred random features of such a small-bandwidth kernel cannot (see
        # "Centre and scale" above), so that check's R² > 0.5 is not claimed.
        tags.regressor_tags.poor_score = True
        return tags

    # ----------------------------------------------------------------- checks

    def _check_params(self):
        if isinstance(self.feature_map, str):
            make_feature_map(self.feature_map)
        elif not (hasattr(self.feature_map, "fit") and hasattr(self.feature_map, "transform")):
            raise TypeError(
                f"feature_map must be one of {', '.join(map(repr, FEATURE_MAPS))} or an "
                f"object with fit(d, random_state) and transform(U); got {self.feature_map!r}"
            )
        for name in ("n_features", "n_subsample"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 2:
                raise ValueError(f"{name} must be an integer >= 2; got {value!r}")
        for name in ("orthogonal", "learn_projection"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False; got {getattr(self, name)!r}")
        # The bandwidth is checked exactly as KernelSmoother checks it.
        KernelSmoother(bandwidth=self.bandwidth)._check_params()
        if isinstance(self.kernel, str):
            if self.kernel not in ("gaussian", "attention"):
                raise ValueError(
                    "kernel must be 'gaussian', 'attention' or an AttentionRegressor; got "
                    f"{self.kernel!r}"
                )
        elif not (
            all(hasattr(self.kernel, a) for a in ATTENTION_CONTRACT) or hasattr(self.kernel, "fit")
        ):
            raise TypeError(
                "kernel must be 'gaussian', 'attention' or an AttentionRegressor (fitted, or "
                f"with a fit method); got {type(self.kernel).__name__}"
            )
        if self.learn_projection:
            if not (isinstance(self.kernel, str) and self.kernel == "gaussian"):
                raise ValueError("learn_projection=True needs kernel='gaussian'")
            if not isinstance(self._feature_map_template(), PositiveRandomFeatures):
                raise ValueError(
                    "learn_projection=True needs positive random features (feature_map="
                    f"'positive', 'hyperbolic' or 'optimal'); got feature_map={self.feature_map!r}"
                )

    def _fit_kernel(self, X, Y, sample_weight):
        self._setup_kernel(X, Y, sample_weight)
        self._start_sums(Y.shape[1], self.y_fit_.shape[1:])
        self._accumulate(X, self._values, sample_weight)
        self._keys_kept = True

    def partial_fit(self, X, y, sample_weight=None):
        """Add a chunk of training data to the sums S, z, S₂.

        The first call (on an unfitted estimator) also fixes what the kernel needs from the
        data — the centre, the bandwidth, the attention model, the features (Nyström
        landmarks too), the target offset — from that chunk, unless given as parameters.
        With ``centre``, ``bandwidth`` and ``random_state`` given (and, for Nyström
        features, the landmarks), any split into chunks gives the fit on the concatenation
        (up to rounding). Later calls (also after ``fit``) only add to the
        sums; the training keys are not kept, so ``attention_weights`` is unavailable and
        queries with an unreliable denominator get the weighted training mean.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array_like of shape (n_samples,), optional

        Returns
        -------
        self
        """
        first = not hasattr(self, "_key_sums")
        previous = dict(self.__dict__)
        try:
            if first:
                self._check_params()
            X, y, sample_weight = self._validate_training_data(X, y, sample_weight, reset=first)
            Y = y.reshape(len(y), -1)
            active = sample_weight > 0
            X, Y, sample_weight = X[active], Y[active], sample_weight[active]
            if first:
                if not len(X):
                    raise ValueError("sample_weight must have at least one positive entry")
                self._setup_kernel(X, Y, sample_weight)
                self._y_offset = np.average(Y, axis=0, weights=sample_weight)
                self._start_sums(Y.shape[1], y.shape[1:])
            elif y.shape[1:] != self._target_shape:
                raise ValueError(
                    f"y has shape {y.shape[1:]} per sample; earlier chunks had "
                    f"{self._target_shape}"
                )
            for name in ("X_fit_", "y_fit_", "sample_weight_", "_values", "_active"):
                self.__dict__.pop(name, None)
            self._keys_kept = False
            self._accumulate(X, Y - self._y_offset, sample_weight)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(previous)
            raise
        return self

    def attention_weights(self, X):
        """The implied weights ``φ(q)ᵀ s_i φ(k_i) / φ(q)ᵀ z`` (rows sum to 1).

        With several heads, ``Σ_h head_weights_[h] w_h(x)``. Needs the training keys, which
        ``fit`` keeps and ``partial_fit`` does not.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)

        Returns
        -------
        weights : ndarray of shape (n_queries, n_train)
        """
        check_is_fitted(self)
        if not self._keys_kept:
            raise RuntimeError(
                "attention_weights needs the training keys, and partial_fit keeps only the "
                "sums S and z; fit on the whole training set to get the weights"
            )
        return super().attention_weights(X)
