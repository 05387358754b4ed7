r"""``LinearAttentionRegressor``: Nadaraya–Watson regression in time linear in the data.

The estimator says only how it gets its kernel: a softmax kernel (the Gaussian smoother's, or
an ``AttentionRegressor``'s heads) and one fitted feature map per head, whose key sums are
accumulated in one pass (:class:`~kernattn.linear._feature_kernel.FeatureKernel`). The
shared engine predicts from that kernel, and sends the rows the features cannot serve
through its exact path.
"""

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Hidden, Interval, StrOptions

from kernattn._core.blocks import (
    KEY_TILE,
    single_threaded_blas,
)
from kernattn._core.namespaces import in_caller_library
from kernattn._core.rows import ChunkRows
from kernattn._engine.regressor import NadarayaWatsonRegressor
from kernattn.bandwidth import BANDWIDTH_RULES
from kernattn.feature_maps import (
    FEATURE_MAPS,
    FeatureMap,
)
from kernattn.learned import AttentionRegressor
from kernattn.linear._cost import (
    CANDIDATE_COMPONENTS,
    EXACT_ROWS,
    LINEAR_SHARE,
)
from kernattn.linear._fallback import (
    NotLinearTimeWarning,
    fallback_warning,
    unserved_message,
)
from kernattn.linear._feature_kernel import exact_moments, served_moments
from kernattn.linear._in_parts import InPartsFitMixin
from kernattn.linear._near_field import NearFieldKernel, predict_by_cell
from kernattn.linear._passes import chunk_arrays
from kernattn.linear._recipe import DESCRIBED, recipe_of
from kernattn.linear._split_fit import take_sums, tol_message, unserved_share
from kernattn.linear._staged import StagedPredictionMixin
from kernattn.linear._weights import AttentionWeightsMixin

#: Default tolerance on the mean L1 distance between approximate and exact weights.
TOL = 0.1


class LinearAttentionRegressor(
    InPartsFitMixin, AttentionWeightsMixin, StagedPredictionMixin, NadarayaWatsonRegressor
):
    r"""Linear attention: a Nadaraya–Watson regressor whose cost is linear in n.

    Approximates the Nadaraya–Watson estimate of a softmax kernel with a feature map
    (Choromanski et al., 2021; Katharopoulos et al., 2020),

    .. math::

        \hat y(x) = \frac{\phi(q)^\top \sum_i s_i \phi(k_i)\, y_i^\top}
                         {\phi(q)^\top \sum_i s_i \phi(k_i)},

    so that the training set is summarized once, in O(n r p) for r features of
    p-dimensional projections, and each prediction costs O(r p) instead of O(n p). The sums
    can be accumulated chunk by chunk (:meth:`partial_fit`).

    **Which kernel.** By default the Gaussian kernel of :class:`~kernattn.KernelSmoother`,
    with ``bandwidth`` meaning exactly what it means there: queries and keys are the inputs,
    centered and divided by the bandwidth, and the Gaussian kernel is
    :math:`\exp(q^\top k) \cdot e^{-\|k\|^2/2} \cdot e^{-\|q\|^2/2}` — the key factor is
    folded into the key features, the query factor cancels. With ``kernel`` an
    ``AttentionRegressor`` (or ``"attention"``), its learned heads are used instead: a
    fitted one as it is, an unfitted one fitted inside ``fit`` on a random subsample of at
    most ``n_subsample`` rows — learn the kernel where n is small, apply it in linear time
    where n is large. With ``learn_projection=True`` the Gaussian kernel's input map
    :math:`P` (``u = Pᵀ(x − c)``, started at ``diag(1/h)``) is trained through the
    feature map itself on the leave-one-out loss, whose sums :math:`S - s_i\phi(k_i)y_i^\top`
    and :math:`z - s_i\phi(k_i)` keep it linear in n (on at most ``n_subsample`` rows;
    Weinberger & Tesauro, 2007).

    **Near field and far field (the default).** At a small bandwidth in several dimensions
    — where Nadaraya–Watson is most accurate — a query's weight sits on a few hundred near
    keys, and no low-rank kernel resolves it. By default (``feature_map="nystroem"``,
    Gaussian kernel) each query's keys are split (sparse + low-rank attention, Chen et al.,
    2021): the keys of the cells nearest to the query's cell (the nearest-center cells of
    about ``n / 50`` random training keys) are computed exactly, the rest through the
    Nyström features, whose estimate over the near cells is subtracted, so no key counts
    twice (:mod:`kernattn.linear._near_field`). With ``n_near_keys="auto"`` the near field
    is grown (steps of about :math:`2^{1/4}` cells) until the weight error measured at fit
    is at most ``tol``: the mean, over 100 training rows each left out of its own sums, of
    the L1 distance :math:`\sum_i |\hat w_i - w_i|` between the split weights and the exact
    kernel's (``weight_error_``), which bounds every prediction's error,
    :math:`|\hat y - y_{\mathrm{exact}}| \le \frac12 \|\hat w - w\|_1 (\max_i y_i -
    \min_i y_i)`. At most ``max(n / 10, 2 n_subsample)`` keys per query, and never more
    than 20 000 (``MAX_NEAR_KEYS``), are computed exactly, so prediction stays linear in n
    (a warning says when ``tol`` is not met there). With ``n_components="auto"`` too, the
    rank (32, 64, …, 1024) is chosen with the near field, as the pair of the lowest
    predicted cost that meets ``tol``. Where the split is predicted to cost more than half
    of the exact weights for as many queries as training rows — always up to about 32 000
    rows (``EXACT_ROWS``) — every weight is computed exactly, as
    :class:`~kernattn.KernelSmoother` does (``exact_weights_``, no warning). Near keys get
    their exact kernel (positive weights, exponentials in single precision: relative error
    below 1e-7); far keys the Nyström estimate, which can be slightly negative; a query
    whose far field has a non-positive denominator uses its near field alone. Weights sum
    to 1. ``partial_fit`` keeps no keys, hence no near field: after it the far field alone
    is used. The user guide (:ref:`linear_attention`) shows the choice and its costs.

    **Center and scale.** Positive random features estimate :math:`\exp(q^\top k)` with a
    relative variance :math:`(\exp(\|q + k\|^2) - 1)/r`, which grows like
    :math:`\exp(\|q\|^2 + \|k\|^2)` in kernel units: the inputs are centered (``center``,
    the weighted mean by default), and random features are accurate only where the
    bandwidth is not small next to the spread of the data; below, their estimate stays
    finite and inside the range of the targets, but it is a different, coarser smoother.
    Nyström features (the kernel at r k-means landmarks of the training keys) resolve the
    kernel wherever the data are, at the resolution r landmarks allow; alone
    (``n_near_keys=0``) they too are coarser at small bandwidths. On the 8-feature task of
    ``examples/benchmarks/bench_linear.py`` (r = 256, n = 50 000) the test MSE is about 15
    times the exact smoother's with positive features, 12 times with
    ``feature_map="optimal"``, 3.3 times with Nyström features alone, and within 1 % with
    the default near field.

    **Numerics.** Query log-features have their row maximum subtracted, key log-features
    one constant per head (both cancel in the ratio); never a constant per key, which would
    not. A query whose denominator :math:`\phi(q)^\top z` is not safely positive (signed
    trigonometric, Nyström or relu features, or underflow), that lies more than 6 kernel
    units from every Nyström landmark, or, for a Gaussian kernel, more than 6 kernel units
    beyond every training key (where the features extrapolate), or, with the near field,
    more than 6 kernel units from every near key, is computed exactly with the
    kernel being approximated — it gets the exact smoother's answer, the nearest training
    target far from the data — and an :class:`~kernattn.linear.ExactFallbackWarning` says
    how many; a :class:`~kernattn.linear.NotLinearTimeWarning` (at fit, measured on a
    sample, and at prediction) when they are more than 10 % of the queries, since each
    costs O(n) and the estimator is no longer linear in n. After ``partial_fit``
    the keys are not kept, so those queries get the weighted mean of the training targets
    instead (also warned). Never NaN.

    Parameters
    ----------
    feature_map : str or FeatureMap, default="nystroem"
        One of "nystroem", "positive", "hyperbolic", "optimal", "trig", "elu", "relu".
        Only Nyström features, whose landmarks lie where the data are, are accurate at
        small bandwidths, and only they take a near field; the random maps are accurate
        for bandwidths that are not small next to the spread of the data (see "Center and
        scale" and :mod:`kernattn.feature_maps` for their error).
        Positive random features (FAVOR+), their hyperbolic variant, generalised positive
        features with the variance-optimal parameter for the training data's
        :math:`\overline{\|q + k\|^2}` (lower variance at small bandwidths), random
        Fourier features, Nyström features (the kernel at landmarks chosen from at most
        ``n_subsample`` training keys; signed, deterministic once chosen), elu + 1, relu
        (see :mod:`kernattn.feature_maps`), or an unfitted
        :class:`~kernattn.feature_maps.FeatureMap` (copied and fitted per head). A map
        whose features are random draws is fitted on all the projected keys (and queries);
        any other map, which may choose from the data (Nyström's landmarks), on the keys
        of at most ``n_subsample`` rows.
    n_components : int or "auto", default="auto"
        r, the number of random features or landmarks (named maps only; elu and relu have
        r = p). ``"trig"`` and ``"hyperbolic"`` features come in pairs (cos and sin of one
        frequency, ``exp(±ωᵀu)``); an odd r adds one unpaired feature (a cosine with a random
        phase, or one of the last pair), which keeps the estimate unbiased. ``"auto"``: 256
        (at most n landmarks); with the near field and ``n_near_keys="auto"``, chosen with
        the near field from ``tol`` (see "Rank and near field from the accuracy target").
    n_near_keys : int or "auto", default="auto"
        (Named ``n_neighbors`` before 0.7.) About how many keys each query computes
        exactly (its near field, rounded to whole cells of about 50 keys); 0 for the far
        field alone (pure low rank). ``"auto"``:
        the fewest near cells whose weight error measured at fit is within ``tol``, for
        Nyström features and the Gaussian kernel — or every weight exactly where that is
        predicted to be cheaper (``exact_weights_``); 0 for other maps, kernels, or a
        learned projection. A positive value needs ``feature_map="nystroem"`` and is used
        whatever the size of the data.
    tol : float, default=0.1
        Tolerance on the mean L1 distance between the approximate and the exact weights
        (between 0 and 2), measured at fit on left-out training rows; used by
        ``n_near_keys="auto"``.
    orthogonal : bool, default=True
        Orthogonal blocks of random frequencies (lower variance; named maps only).
    bandwidth : float, array_like, or {"scott", "silverman", "loo"}, default="scott"
        As in :class:`~kernattn.KernelSmoother`. ``"loo"`` minimizes the exact leave-one-out
        error, O(n²): on more than ``n_subsample`` rows it is run on a random subsample of
        ``n_subsample`` rows and the bandwidth rescaled by Scott's factor
        :math:`(n_{\mathrm{sub}}/n)^{1/(d+4)}`. Ignored when ``kernel`` is an
        ``AttentionRegressor``.
    center : array_like of shape (n_features,), default=None
        Subtracted from the inputs; ``None``: the weighted mean of the training inputs (of
        the first chunk, with ``partial_fit``). Ignored when ``kernel`` is an
        ``AttentionRegressor`` (its own center is used).
    kernel : {"gaussian", "attention"} or AttentionRegressor, default="gaussian"
        The softmax kernel being approximated, see above (``"attention"``: a default
        ``AttentionRegressor`` fitted on the subsample). Its similarity must be ``"dot"``,
        ``"cosine"`` or ``"gaussian"``, and its prediction the softmax average of its heads
        (no ``warp``, ``degree=1`` or ``tilt=True``; ``"auto"`` means neither here).
    learn_projection : bool, default=False
        Train the Gaussian kernel's input map through positive features (Gaussian kernel
        and positive, hyperbolic or optimal features only).
    n_subsample : int, default=2000
        Most rows used for what costs more than linear time (the "loo" bandwidth, fitting an
        AttentionRegressor, training the projection) or needs only a sample (choosing
        Nyström landmarks).
    random_state : int, RandomState instance or None, default=None
        Draws, in this order: the subsamples of the bandwidth search and of the attention
        model (and the model's own seed), then per head the features (after a subsample for
        a map fitted on one), then the subsample of the learned projection.
    n_jobs : int, default=None
        Threads for prediction and weights of large problems: ``None`` all cores (or the
        ``n_jobs`` of an enclosing ``joblib.parallel_config``), −1 all cores, a positive
        number that many. A thread limit set around the call with
        ``threadpoolctl.threadpool_limits`` is honored. Results do not depend on it.
    n_neighbors : int or "auto"
        Deprecated since 0.7: the former name of ``n_near_keys``, removed in 0.8.

    Attributes
    ----------
    center_ : ndarray of shape (n_features,)
        Subtracted from the inputs before scaling.
    input_scale_ : ndarray of shape (n_features,)
        The inputs are divided by it after centering: the bandwidth for the Gaussian kernel
        (ones when the projection is learned: it holds the scale), the attention model's
        standardization otherwise.
    bandwidth_ : ndarray of shape (n_features,)
        The bandwidth of the Gaussian kernel (the starting point of a learned projection).
        Gaussian kernel only.
    query_projection_, key_projection_ : ndarray of shape (n_heads, n_features, head_dim)
        Head h's query is :math:`q = \sqrt{s_h}\, \mathrm{norm}((x - c)/\sigma\, W_h)`
        with :math:`c` ``center_``, :math:`\sigma` ``input_scale_``, :math:`W_h`
        ``query_projection_[h]``, :math:`s_h` ``scale_[h]`` and ``norm`` the unit
        normalization for the cosine similarity (the identity otherwise); keys likewise
        with ``key_projection_``. The identity for the Gaussian kernel.
    key_shift_ : ndarray of shape (n_heads, head_dim)
        Subtracted from a head's queries and keys before the feature map sees them: the
        weighted mean of the keys for a Gaussian similarity (which leaves
        :math:`\|q - k\|` unchanged and keeps the features' inputs small), 0 otherwise.
    scale_ : ndarray of shape (n_heads,)
        The multiplier of each head's similarity (1 for the Gaussian kernel; the inverse of
        a temperature, as the scale of PyTorch's ``scaled_dot_product_attention``).
    head_weights_ : ndarray of shape (n_heads,)
        Mixture weights of the heads' estimates.
    head_bias_ : ndarray of shape (n_outputs,)
        Added to the mixture, in target units:
        ``predict(X) = Σ_h head_weights_[h] ŷ_h(X) + head_bias_``.
    similarity_ : {"dot", "cosine", "gaussian"}
        The similarity of the heads.
    feature_maps_ : list of FeatureMap
        The fitted feature map of every head.
    attention_model_ : AttentionRegressor
        The model whose heads are used (``kernel`` other than "gaussian").
    irrelevant_features_ : ndarray of bool, shape (n_features,)
        With ``bandwidth="loo"``: the features whose leave-one-out bandwidth ended on the
        upper edge of its search range (a factor 1000 above Scott's rule), so that the kernel
        ignores them, as in :class:`~kernattn.KernelSmoother`.
    loo_error_ : float
        Leave-one-out mean squared error reached (``bandwidth="loo"`` or
        ``learn_projection=True``), in the targets' units. The ``"loo"`` search works on
        the targets divided by a power of two, so it is not affected by their scale; only
        this reported error is ``inf`` when its true value overflows (targets beyond about
        1e154) and 0 when it underflows.
    n_components_ : int
        The number of features used (the most of any head); 0 when the weights are computed
        exactly without features (``exact_weights_`` on small data).
    n_near_keys_ : float
        (Named ``n_neighbors_`` before 0.7.) Keys computed exactly per query by the near
        field, averaged over the training keys' cells (near field only; the number of
        training rows with ``exact_weights_``).
    weight_error_ : float
        The mean L1 distance between the split weights and the exact weights of 100
        training rows, each left out of its own sums, measured at fit (near field only;
        see above). Between 0 and 2; half of it times the range of the targets bounds the
        prediction error of such a row. 0 with ``exact_weights_``.
    exact_weights_ : bool
        Whether every weight is computed exactly, as the exact smoother does, because the
        split into near and far field was predicted to cost more (``n_near_keys="auto"``
        with the Nyström map; see "Exact weights where the split would not pay"). False
        after ``partial_fit``, which keeps no keys.
    kernel_ : FeatureKernel or NearFieldKernel
        The fitted kernel the engine predicts with: the feature maps, the key sums
        :math:`S, S_2, z` of every head, and (after ``fit``) the exact softmax heads bound
        to the training keys; with the near field, also the per-cell sums and the keys in
        cell order.
    X_fit_, y_fit_, sample_weight_ : ndarray
        The training set, after ``fit`` only: ``partial_fit`` keeps the sums, not the keys,
        so ``attention_weights`` is not available after it.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    See Also
    --------
    kernattn.KernelSmoother : the exact Gaussian smoother this approximates by default.
    kernattn.AttentionRegressor : exact attention with a learned kernel.
    kernattn.feature_maps : the feature maps.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
    .. [2] A. Katharopoulos et al., "Transformers are RNNs: fast autoregressive
       transformers with linear attention", ICML 2020.
    .. [3] A. Rahimi, B. Recht, "Random features for large-scale kernel machines",
       NeurIPS 2007.
    .. [4] C. K. I. Williams, M. Seeger, "Using the Nyström method to speed up kernel
       machines", NeurIPS 2001.
    .. [5] K. Q. Weinberger, G. Tesauro, "Metric Learning for Kernel Regression",
       AISTATS 2007.
    .. [6] B. Chen et al., "Scatterbrain: unifying sparse and low-rank attention",
       NeurIPS 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import KernelSmoother, LinearAttentionRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, (2000, 2))
    >>> y = X[:, 0] + np.sin(2 * X[:, 1])
    >>> linear = LinearAttentionRegressor(bandwidth=0.05, random_state=0).fit(X, y)
    >>> exact = KernelSmoother(bandwidth=0.05).fit(X, y)
    >>> gap = linear.predict(X[:5]) - exact.predict(X[:5])
    >>> bool(np.abs(gap).max() < 0.05), linear.weight_error_ <= linear.tol
    (True, True)

    Random features, at a bandwidth that is not small next to the spread of the data; the
    training set can also come in chunks, whose sums add up:

    >>> exact = KernelSmoother(bandwidth=1.0).fit(X, y)
    >>> chunked = LinearAttentionRegressor(
    ...     feature_map="positive", n_components=4096, bandwidth=1.0, random_state=0
    ... )
    >>> for rows in np.array_split(np.arange(2000), 5):
    ...     chunked = chunked.partial_fit(X[rows], y[rows])
    >>> gap = chunked.predict(X[:5]) - exact.predict(X[:5])
    >>> bool(np.abs(gap).max() < 0.05)
    True
    """

    # Rows in the order given: chunks (partial_fit, fit_chunks) and dask partitions arrive
    # in that order, and the in-memory fit draws the same rows for its landmarks and
    # subsamples as they do.
    _canonical_rows = False
    _parameter_constraints: dict = {
        **NadarayaWatsonRegressor._parameter_constraints,
        "feature_map": [StrOptions(set(FEATURE_MAPS)), FeatureMap],
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_near_keys": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "n_neighbors": [
            Interval(Integral, 0, None, closed="left"),
            StrOptions({"auto"}),
            Hidden(StrOptions({"deprecated"})),
        ],
        "tol": [Interval(Real, 0, 2, closed="neither")],
        "orthogonal": ["boolean"],
        "bandwidth": [
            Interval(Real, 0, None, closed="neither"),
            "array-like",
            StrOptions(set(BANDWIDTH_RULES)),
        ],
        "center": [None, "array-like"],
        "kernel": [StrOptions({"gaussian", "attention"}), AttentionRegressor],
        "learn_projection": ["boolean"],
        "n_subsample": [Interval(Integral, 2, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        feature_map="nystroem",
        n_components="auto",
        n_near_keys="auto",
        tol=TOL,
        orthogonal=True,
        bandwidth="scott",
        center=None,
        kernel="gaussian",
        learn_projection=False,
        n_subsample=2000,
        random_state=None,
        n_jobs=None,
        n_neighbors="deprecated",
    ):
        self.feature_map = feature_map
        self.n_components = n_components
        self.n_near_keys = n_near_keys
        self.tol = tol
        self.orthogonal = orthogonal
        self.bandwidth = bandwidth
        self.center = center
        self.kernel = kernel
        self.learn_projection = learn_projection
        self.n_subsample = n_subsample
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.n_neighbors = n_neighbors

    @property
    def n_neighbors_(self):
        """Deprecated since 0.7: the former name of ``n_near_keys_``, removed in 0.8."""
        warnings.warn(
            "n_neighbors_ was renamed n_near_keys_ in 0.7 and will be removed in 0.8",
            FutureWarning,
            stacklevel=2,
        )
        return self.n_near_keys_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # scikit-learn's training-score check fits 10 standardized features at Scott's
        # bandwidth, where the exact smoother scores by (nearly) memorising each point; a
        # few hundred random features of such a small-bandwidth kernel cannot (see
        # "Center and scale" above), so that check's R² > 0.5 is not claimed.
        tags.regressor_tags.poor_score = True
        return tags

    # ------------------------------------------------------------------ checks

    def _check_params(self):
        super()._check_params()
        # The near field's size, under its name since 0.7 or the one it had before.
        self._n_near = self.n_near_keys
        if not (isinstance(self.n_neighbors, str) and self.n_neighbors == "deprecated"):
            warnings.warn(
                "n_neighbors was renamed n_near_keys in 0.7 (it counts the keys each query "
                "computes exactly, not neighbors of a k-nearest-neighbor average) and will be "
                "removed in 0.8; use n_near_keys",
                FutureWarning,
                stacklevel=4,
            )
            self._n_near = self.n_neighbors
        self._recipe().check_settings(self._n_near)

    def _near_field(self):
        """Whether the kernel splits each query's keys (:meth:`KernelRecipe.splits`)."""
        return self._recipe().splits(self._n_near)

    # ----------------------------------------------------------------- fitting

    def fit(self, X, y, sample_weight=None):
        """Fit the kernel and sum the training set's features.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training inputs (the keys). A dask array or dataframe is fitted where it lives:
            each partition's sums are computed on its worker and added up a tree, and what
            the kernel needs from the data is taken from full-data statistics and a sample
            drawn on the workers (needs the ``dask`` extra; see
            :doc:`/user_guide/distributed`). The near field's cells are then centered on
            sampled rows and their sums taken with the totals; at prediction each
            partition computes its near keys exactly where it lives.
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
            Training targets (the values); a dask collection along with a dask ``X``.
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative. An integer weight is the same as repeating the row.

        Returns
        -------
        self : LinearAttentionRegressor
            The fitted estimator.

        Notes
        -----
        The rows are fitted in the order given, as chunks and partitions arrive: the rows
        drawn for landmarks and subsamples are those a chunked or distributed fit of the
        same rows draws. A permutation of the rows can change which rows are drawn, and the
        rounding of the feature sums.
        """
        return super().fit(X, y, sample_weight)

    def _fit_kernel(self, X, Y, sample_weight):
        for name in ("weight_error_", "n_near_keys_"):
            self.__dict__.pop(name, None)
        self.exact_weights_ = False
        # Many small products: BLAS threads would spin more than they compute.
        rank, exact = None, False
        if self._near_field() and self._n_near == "auto":
            # Even the cheapest split costs more than the exact weights: no feature map (the
            # far field's sums are taken if partial_fit asks for them).
            # (A map given as an object is fitted all the same, and its parameters checked.)
            exact = len(X) <= EXACT_ROWS and isinstance(self.feature_map, str)
            if self.n_components == "auto":
                # The near field chooses its rank from tol: the smallest candidate first.
                rank = min(CANDIDATE_COMPONENTS[0], len(X))
        with single_threaded_blas():
            kernel = self._make_kernel(X, Y, sample_weight, rank=rank, fit_maps=not exact)
        if exact:
            self.exact_weights_ = True
            self.weight_error_, self.n_near_keys_ = 0.0, float(len(X))
            return kernel.bind(X, sample_weight, self._dtype)
        # Drawn after everything _make_kernel draws, so that its draws do not change.
        rng = check_random_state(check_random_state(self.random_state).randint(2**31 - 1))
        kernel, rows, choice = take_sums(
            kernel,
            X,
            self._values,
            sample_weight,
            self._dtype,
            rng,
            subsample=self._recipe().subsample,
            near_field=self._near_field(),
            n_near=self._n_near,
            tol=self.tol,
            n_subsample=self.n_subsample,
            rank=self.n_components == "auto" and self._n_near == "auto",
        )
        if choice is not None:
            self._record_near_field(kernel, choice)
        if self.exact_weights_:
            self.weight_error_, self.n_near_keys_ = 0.0, float(len(X))
        else:
            with single_threaded_blas():
                self._check_fallback_share(kernel, X[rows])
        return kernel

    def _record_near_field(self, kernel, choice):
        """Record the near field chosen at fit (and the far field's map chosen with it)."""
        if choice.feature_map is not None:
            self.feature_maps_ = [choice.feature_map]
            self.n_components_ = choice.feature_map.n_components_
        if not choice.met:
            warnings.warn(tol_message(choice.errors, self.tol, kernel), UserWarning, stacklevel=4)
        self.weight_error_ = float(choice.errors.mean())
        self.n_near_keys_ = kernel.mean_near_keys
        self.exact_weights_ = choice.exact_weights

    def _check_fallback_share(self, kernel, X_sample):
        """Warn at fit when the features cannot serve more than 10 % of the training rows:
        those would be computed against every key."""
        share = unserved_share(kernel, X_sample)
        if share is not None and share > LINEAR_SHARE:
            warnings.warn(
                unserved_message(share, len(X_sample)), NotLinearTimeWarning, stacklevel=4
            )

    # ------------------------------------------------------------ the kernel

    def _recipe(self):
        """How this estimator makes its kernel (its settings, plain)."""
        return recipe_of(self)

    def _make_kernel(self, X, Y, sample_weight, **options):
        """The kernel from (the first chunk of) the data, with empty sums (see
        :meth:`KernelRecipe.make <kernattn.linear._recipe.KernelRecipe.make>`, whose
        keyword ``options`` it takes); sets the fitted attributes that describe it."""
        kernel, described = self._recipe().make(
            X, Y, sample_weight, self._y_offset, self._value_scale, **options
        )
        for name in DESCRIBED:
            self.__dict__.pop(name, None)
        self.__dict__.update(described)
        return kernel

    # ------------------------------------------------------------ engine hooks

    def _kernel_chosen_with_targets(self):
        # Random features and Nystroem landmarks read the inputs only.
        learned = self.learn_projection or not isinstance(self.kernel, str)
        searched = isinstance(self.bandwidth, str) and self.bandwidth == "loo"
        return learned or self.kernel == "attention" or searched

    def _all_weights_exact(self):
        """Whether the weights are computed exactly (``exact_weights_``, keys kept)."""
        return getattr(self, "exact_weights_", False) and self.kernel_.exact_heads is not None

    def _exact_kernel(self):
        """The exact kernel where every weight is computed exactly; ``None`` otherwise (the
        leave-one-out residuals then remove each row's own implied weight)."""
        return self.kernel_.exact_heads if self._all_weights_exact() else None

    def _head_moments(self, X, h, return_std, exact=None, moments=None):
        """Head ``h``'s moments from the features (``moments``: already computed, by
        cell), the rows they cannot serve from ``exact`` (default: the exact kernel bound
        to the kept keys; ``None`` without keys: the training mean)."""
        exact = self.kernel_.exact_heads if exact is None else exact
        unreliable = None
        if self._all_weights_exact():
            first, second = exact_moments(
                self.kernel_.exact_heads, X, h, self._value_columns, self.kernel_.n_outputs
            )
        else:
            # No value columns where no keys are kept: the exact rows are given elsewhere.
            first, second, unreliable = served_moments(
                self.kernel_, X, h, exact, lambda: getattr(self, "_value_columns", None), moments
            )
        if not return_std:
            return first, None, unreliable
        if exact is None:
            # Without keys nothing can be redone: a spread lost to cancellation is clipped.
            return first, np.maximum(second - first**2, 0.0), unreliable
        # Weights that sit on values far from the global mean (compared with their spread)
        # leave E[v²] − E[v]² with no correct digit: those rows are redone as
        # Σ_i w_i (v_i − ŷ)² with the weights of the kernel the features approximate.
        return (
            first,
            self._accurate_spread(X, h, first, second - first**2, second, exact),
            unreliable,
        )

    def _block_width(self):
        if self._all_weights_exact():
            return self.kernel_.exact_heads.n_keys, KEY_TILE
        return self.kernel_.n_components, None

    def _predict_centered(self, X, return_std, heads=None, exact=None, near=None):
        """:meth:`NadarayaWatsonRegressor._predict_centered`, by cell for the near field;
        ``near``: the queries' near sums, taken where the keys are (a prediction in
        stages, :mod:`kernattn.linear._staged`)."""
        near_field = isinstance(self.kernel_, NearFieldKernel) and (
            self.kernel_.near_keys is not None or near is not None
        )
        if not near_field or self._all_weights_exact():
            return super()._predict_centered(X, return_std, heads, exact)

        def moments_at(rows, moments):
            return self._head_moments(rows, 0, return_std, exact, moments)

        mean, variance, n_fallback = predict_by_cell(
            self.kernel_, X, moments_at, return_std, self._dtype, self.n_jobs, near
        )
        self._report_fallback(n_fallback, len(X))
        return mean, variance

    def _report_fallback(self, n_fallback, n_queries):
        if n_fallback:
            keys_kept = self.kernel_.exact_heads is not None
            warnings.warn(*fallback_warning(n_fallback, n_queries, keys_kept), stacklevel=4)

    @in_caller_library
    def predict(self, X, return_std=False):
        """Linear-attention estimate at each query.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        return_std : bool, default=False
            Also return the weighted spread of the training targets around the estimate,
            ``sqrt(Σ_i w_i(x) (y_i − ŷ(x))²)``, from the feature sums as
            ``E_w[v²] − E_w[v]²``. Where that difference cancels (weights that sit on
            targets far from the training mean compared with their spread: below
            ``1e-4 E_w[v²]``, or negative), the row is recomputed as the exact kernel's
            ``Σ_i w_i (y_i − ŷ(x))²`` from the kept training keys. After ``partial_fit`` no
            keys are kept, and the spread of such rows is clipped at 0 (it may then read 0
            although the neighbors disagree).

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) or (n_queries, n_outputs)
            In the precision of the training inputs (float32 stays float32).
        y_std : ndarray of the same shape
            Only when ``return_std=True``.
        """
        return super().predict(X, return_std=return_std)


def fit_chunks(estimator, chunks):
    """Fit a :class:`~kernattn.LinearAttentionRegressor` on chunks of rows, in two passes.

    Streams a training set that need not fit in memory (``numpy.memmap`` slices, files read
    one at a time) through ``estimator`` in two passes: the first takes the statistics and
    a uniform sample the kernel needs (the center, the bandwidth, Nyström landmarks; see
    :ref:`distributed`), the second adds every chunk's features to the key sums. The chunks
    are processed on the estimator's ``n_jobs`` threads and merged in order (the result
    does not depend on the number of threads); memory is that of ``n_jobs + 1`` chunks and
    of the sample (``n_subsample`` rows), whatever the number of rows. It is the
    estimator's own ``fit``, on the chunks.

    The result is the fit on the concatenated chunks up to the order of the sums (exactly
    so for ``n ≤ n_subsample`` or, with Scott's rule or a given bandwidth, for random
    feature maps), except that, as after ``partial_fit``, the keys are not kept: there is
    no near field (the Nyström features serve alone, as with ``n_near_keys=0``; a warning
    says so unless ``n_near_keys=0`` is given), the queries the features cannot serve get
    the weighted training mean (with a warning) and ``attention_weights`` is unavailable.
    Unlike a loop of ``partial_fit`` calls, nothing is fixed from the first chunk alone;
    ``partial_fit`` can add chunks afterwards. Conformal intervals need held-out rows: the
    estimator's ``calibrate`` on rows kept out of the chunks, then ``conformal_interval(X,
    method="split")``.

    Parameters
    ----------
    estimator : LinearAttentionRegressor
        Fitted in place (an earlier fit is replaced; a failed fit leaves it as it was).
    chunks : iterable or callable
        Tuples ``(X, y)`` or ``(X, y, sample_weight)``, the same in both passes: an iterable
        that can be iterated twice (a list, a ``range``-like object), or a function of no
        arguments returning a fresh iterator each time it is called (a generator function).

    Returns
    -------
    estimator : LinearAttentionRegressor
        The fitted estimator.

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import LinearAttentionRegressor, fit_chunks
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(1500, 2))
    >>> y = np.sin(X[:, 0]) + X[:, 1]
    >>> def chunks():
    ...     for start in range(0, len(X), 500):
    ...         yield X[start : start + 500], y[start : start + 500]
    >>> model = LinearAttentionRegressor(n_near_keys=0, random_state=0)  # no near field
    >>> streamed = fit_chunks(model, chunks)
    >>> whole = LinearAttentionRegressor(n_near_keys=0, random_state=0).fit(X, y)
    >>> bool(np.allclose(streamed.predict(X[:5]), whole.predict(X[:5])))
    True
    """
    if not isinstance(estimator, LinearAttentionRegressor):
        raise TypeError(
            f"fit_chunks fits a LinearAttentionRegressor; got {type(estimator).__name__}"
        )
    if callable(chunks):
        make_iterator = chunks
    elif iter(chunks) is chunks:
        raise TypeError(
            "chunks is an iterator, which can be read only once; fit_chunks reads the "
            "chunks twice: pass a list, or a function returning a fresh iterator"
        )
    else:

        def make_iterator():
            return iter(chunks)

    return estimator.fit(ChunkRows(make_iterator, chunk_arrays, n_jobs=estimator.n_jobs), None)
