r"""``KernelSmoother``: the classical Nadaraya–Watson (and local-linear) kernel smoother.

The Gaussian smoother is softmax attention in disguise: with :math:`q = x/h`, :math:`k = x_i/h`,

.. math::

    -\tfrac12 \|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2,

and the last term depends on the query only, so it cancels in the softmax: the weights are
``softmax(q·k − ½‖k‖²)``, dot-product attention with scale 1 and a key bias. The bandwidth
rules and the leave-one-out search live in :mod:`kernattn.bandwidth`.
"""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from kernattn._core.docstrings import fill_doc
from kernattn._engine.inference import LinearSmootherInference
from kernattn._engine.regressor import (
    FIT_RETURNS_AND_NOTES,
    HELD_BACK_ROWS,
    NadarayaWatsonRegressor,
)
from kernattn._local.polynomial import check_degree
from kernattn.bandwidth import BANDWIDTH_RULES, CRITERIA
from kernattn.bandwidth._mixed import categorical_codes, dtype_categories
from kernattn.bandwidth._search import subset_sizes
from kernattn.kernels import KERNELS
from kernattn.smoother._binned.kernel import (
    BinnedInference,
    BinnedKernel,
)
from kernattn.smoother._inference import SmootherInference
from kernattn.smoother._kernel import bandwidth_heads, local_polynomials
from kernattn.smoother._parts import search_on_parts, unsupported_on_parts, warn_in_memory
from kernattn.smoother._selection import (
    binned_trace,
    mixed_encoding,
    select_in_units,
    select_mixed,
    warn_lower_edge,
)
from kernattn.smoother._tier import (
    binned_reason,
    check_binned_possible,
    final_tier,
    search_on_bins,
    search_tier,
)

#: The values of ``algorithm``.
ALGORITHMS = ("auto", "exact", "binned")
#: Up to this many training rows the binned tier measures ``held_back_`` on the exact
#: kernel (at most 512 rows against every key), and the noise estimate of
#: ``predict_interval`` and ``gradient`` from every row's exact weights; beyond, both on
#: the gridded sums.
_EXACT_HELD_BACK_ROWS = 20_000


class KernelSmoother(SmootherInference, NadarayaWatsonRegressor):
    r"""Nadaraya–Watson kernel regression (local constant or local linear).

    The estimate at a query :math:`x` is the kernel-weighted average of the training targets,

    .. math::

        \hat y(x) = \sum_i w_i(x)\, y_i, \qquad
        w_i(x) \propto s_i\, \kappa\!\left(\frac{x - x_i}{h}\right),

    with per-feature bandwidth :math:`h` and sample weights :math:`s_i`. For the Gaussian
    kernel :math:`\kappa(u) = \exp(-\|u\|^2/2)`, :math:`h_j` is the kernel's standard deviation
    in feature :math:`j`'s units, and the weights are exactly softmax attention with queries
    :math:`x/h`, keys :math:`x_i/h`, scale 1 and key bias :math:`-\|x_i/h\|^2/2`.

    With ``degree=1`` the estimate is local linear: at each query a weighted least-squares
    line is fitted with the same weights and evaluated at the query; ``degree=2`` (and 3
    with one feature) a local polynomial of that degree (Fan and Gijbels 1996; R np's
    ``regtype="lp"``, KernSmooth's ``locpoly``). This removes the boundary bias of the
    local-constant estimate (which flattens towards the inside at the edges of the data)
    and, from degree 2, the bias at peaks and valleys; it is still linear in the targets,
    ``ŷ(x) = Σ_i l_i(x) y_i`` with ``Σ_i l_i(x) = 1``, but the equivalent weights
    :math:`l_i` can be negative. The polynomial is solved scale-invariantly (see
    :mod:`kernattn._local.polynomial`): a huge bandwidth gives the least-squares
    polynomial of all the data, a vanishing one interpolates the training targets.

    **Safe everywhere.** Where its local design cannot support it, a local polynomial is
    noisy without bound: far outside the data, or where the weights rest on fewer distinct
    inputs than it has coefficients. Its variance is :math:`\sigma^2 \sum_i l_i(x)^2`
    (:math:`\sigma^2` the noise of one observation; the local constant's factor is at
    most 1), and a query whose plain polynomial would have :math:`\sum_i l_i^2 > 4` — more
    than twice as noisy, in standard deviation, as one observation — is *held back*: its
    coefficients are shrunk toward the local constant by a ridge (Seifert and Gasser
    1996) until :math:`\sum_i l_i^2 = 4`. Its estimate then lies between the local
    constant (the Nadaraya–Watson estimate at the query) and a bounded extrapolation,
    within :math:`2\sqrt{L}` weighted standard deviations of the targets around the local
    constant (:math:`L` the shrunk leverage), never an unbounded one. So is a query away
    from its local design along a direction the design does not resolve (the fit is
    constant along it). Training points are never held back in sample (their own weight
    is the largest: :math:`\sum_i l_i^2 \le 1`); ``predict`` (and every method built on
    it) says how many queries were with a :class:`~kernattn.LocalDesignWarning`, and
    ``held_back_`` gives the share of the training rows held back in leave-one-out.

    Parameters
    ----------
    kernel : {"gaussian", "epanechnikov", "tricube"}, default="gaussian"
        The radial profile of the kernel (see :mod:`kernattn.kernels`). The compact ones give
        a query outside every training point's support its nearest training target.
    bandwidth : float, array_like or str, default="scott"
        One of the strings "scott", "silverman", "loo", "aic", "gcv", "plugin", or numbers.
        A positive float (the same bandwidth for every feature), one positive float per
        feature, a normal-reference rule (one bandwidth per feature from its spread), or a
        selection criterion of the estimator actually fitted (the local polynomial of
        ``degree``, held back where it is), minimized per feature: ``"loo"`` the leave-one-out
        squared error, ``"aic"`` the corrected AIC of Hurvich, Simonoff and Tsai (1998),
        ``"gcv"`` generalized cross-validation (a grid over a common multiple of Scott's
        bandwidths, then all of them refined by gradient descent; see
        :func:`~kernattn.bandwidth.select_bandwidth`). For ``degree ≥ 1`` that search keeps
        ``effective_dof_`` at most half the training rows: below it, on small samples with
        few distinct values per feature, the criterion's minimum can fall among bandwidths
        where most leave-one-out polynomials are held back and the fit nearly interpolates
        (on R's ``MASS::cpus`` with 1.6 to 1.9 times the test error of the supported one).
        On the binned tier (``algorithm_``)
        the criteria are evaluated on binned sums at every training row (a curve over
        1/16 to 4 times :math:`\sigma_j n^{-1/(d+4)}`, then Brent's search; see
        :mod:`kernattn.smoother._binned.search`), at :math:`O(G \log G + n)` per bandwidth for a
        grid of :math:`G` points (grids for a tolerance of 1e-2 in 1-D, 3e-2 in 2-D: at
        10⁶ rows of a 2-D task the chosen bandwidths agree with those at 1e-2 to 0.2 %,
        in half the time). With ``algorithm="exact"`` the same binned search is used
        for more than 100 000 rows (where the exact search on 2 400 sampled queries is too
        noisy to find the minimum); the predictions stay exact. ``"plugin"``: the direct
        plug-in bandwidth of local-linear regression (Ruppert, Sheather and Wand 1995; R
        KernSmooth's ``dpill``), for one continuous feature, one output and no sample weights (a
        ``ValueError`` otherwise); it is tuned for ``degree=1``. The selected bandwidths
        do not depend on the units of ``X`` or ``y``. Features are not rescaled otherwise.
    degree : int or "auto", default=0
        The degree of the local polynomial: 0 for Nadaraya–Watson (local constant), 1 for
        local linear, 2 for local quadratic (with one feature also 3, local cubic). With
        discrete features the polynomial is in the continuous ones (without any it is the
        local constant). ``"auto"``: 0 or 1, whichever has the lower value of the
        bandwidth criterion (``"loo"``, ``"aic"`` or ``"gcv"``), each at its own selected
        bandwidths, or, with a rule or given bandwidths, the lower leave-one-out error at
        them (on at most 2 400 training rows, each against every key); ties go to the local
        constant, and so does a training set of fewer than 2 distinct inputs (leaving one
        out leaves no key to compare on). ``degree_`` records the choice.
    n_jobs : int, default=None
        Threads for the leave-one-out search and for exact prediction and weights of large
        problems: ``None`` all cores (or the ``n_jobs`` of an enclosing
        ``joblib.parallel_config``), −1 all cores, a positive number that many. A thread
        limit set around the call with ``threadpoolctl.threadpool_limits`` is honored.
    random_state : int, RandomState instance or None, default=None
        Draws the subsets of queries a selector searches on for training sets of more than
        4 000 rows (see :func:`~kernattn.bandwidth.select_bandwidth`); smaller ones are
        searched exactly and do not use it.
    verbose : int, default=0
        1 prints a line per stage of a bandwidth search, 2 also one per evaluation of the
        criterion.
    categorical_features : array_like of int or bool, or "from_dtype", default=None
        Unordered discrete features, smoothed with the Aitchison–Aitken kernel (weight
        :math:`1 - \lambda` within a level, :math:`\lambda/(c-1)` across the :math:`c`
        levels): indices, a boolean mask of ``n_features`` entries, or ``"from_dtype"``
        (the unordered pandas categorical columns of a DataFrame, which may hold strings).
        Their bandwidth is :math:`\lambda \in [0, (c-1)/c]`: 0 averages the query's own
        level only, :math:`(c-1)/c` ignores the feature. A level not seen in training leaves
        the feature out of that query's weights. Needs ``kernel="gaussian"``: the product
        kernel is then the Gaussian of one-hot (for ordinal features also cumulative)
        codes of the levels, still softmax attention. With ``degree=1`` the local line is
        fitted in the continuous features only and the discrete features enter through the
        kernel weights, as in Li and Racine (2004) and R np's local-linear ``npreg`` (with
        no continuous feature it is the local-constant estimate). statsmodels'
        ``KernelReg`` also puts the codes of the levels in its line; the two agree where
        every λ is 0.
    ordinal_features : array_like of int or bool, or "from_dtype", default=None
        Ordered discrete features, smoothed with the Wang–van Ryzin kernel (weight
        :math:`1 - \lambda` within a level, :math:`\tfrac12(1-\lambda)\lambda^{|x - x'|}`
        across levels, with :math:`|x - x'|` the difference of the values, or of the codes of
        an ordered pandas categorical); bandwidth :math:`\lambda \in [0, 1]`. Given as
        for ``categorical_features``.

        With discrete features, a float bandwidth or a rule sets the continuous features
        and gives every discrete feature :math:`\lambda = 0`; an array gives :math:`h` for
        each continuous and :math:`\lambda` for each discrete feature; a selection criterion
        (``"loo"``, ``"aic"``, ``"gcv"``) chooses them all, as R np's ``npregbw`` does
        (``"loo"`` leaves a row's exact duplicates out with it when there is a continuous
        feature; with discrete features only, the rows of a cell are neighbours, not copies,
        and only the row itself is left out).
    algorithm : {"auto", "exact", "binned"}, default="auto"
        How the kernel sums are evaluated. ``"exact"``: one kernel value per (query,
        training row) pair. ``"binned"`` (one or two continuous features, Gaussian kernel):
        the training rows are binned linearly onto a regular grid, the local-polynomial
        moments at every grid point are convolutions of the bins with the sampled kernel
        (FFT or direct), and a query interpolates them (Fan and Marron 1994; R
        KernSmooth). The grid is chosen from the bandwidth so that the estimate's error
        against the exact one is below 1e-3 times the local spread of the targets (bounded
        in ``binning_error_``; where that grid would exceed ``working_memory``, the
        smallest of 2e-3, 4e-3, 8e-3 that fits); queries outside the data's range, held
        back by (or near) the variance rule, with no kernel mass on the grid, or in the
        cells where a check of the grid at fit finds that bound at risk (gaps between
        clusters of data; counted in ``exact_cells_``) are computed exactly.
        ``"binned"`` raises a ``ValueError`` saying why where it is not possible (three or
        more features, discrete features, a compact kernel, a grid beyond
        ``working_memory``). ``"auto"`` chooses the binned tier where it is possible and
        the cost model of :func:`kernattn.smoother._binned.cost.choose_algorithm` (for
        predicting the training rows, at the normal-reference bandwidth and then at
        ``bandwidth_``) says it is cheaper, from 10 000 training rows; the exact tier
        otherwise (below that the exact sums are fast, and small fits stay exact to
        rounding). ``predict`` (with
        ``return_std``, and ``score``) uses the binned sums, and so does the analytic
        ``predict_interval`` beyond 20 000 rows: its variance :math:`\sum_i l_i(x)^2
        \sigma^2(x_i)/s_i` is a quadratic form in the squared kernel's moments of the
        binned noise, and the noise estimate (of ``gradient``'s standard errors too) is
        taken from the gridded sums once per fit, :math:`O(n)`; below, from every row's
        exact weights. ``attention_weights``, ``attention_entropy``, ``gradient`` and the
        bootstrap intervals need every weight and use the exact kernel on either tier
        (:math:`O(n)` per query).

    Attributes
    ----------
    bandwidth_ : ndarray of shape (n_features,)
        The bandwidth used, one per feature (for a discrete feature, its :math:`\lambda`).
    loo_error_ : float
        Leave-one-out mean squared error of this estimator (of its ``degree``) at
        ``bandwidth_`` (only with ``bandwidth="loo"``; for more than 4 000 training rows, an
        unbiased estimate from the last subset of queries of the search; on the binned tier
        over every row, from the binned sums). In the targets' squared units: ``inf``
        where that square is beyond the float range (targets near 2¹⁰⁰⁰).
    criterion_ : float
        The AICc or GCV value reached (only with ``bandwidth="aic"`` or ``"gcv"``).
    effective_dof_ : float
        The effective degrees of freedom, :math:`\mathrm{tr}(S)`, the trace of the smoother
        matrix at the training points (only with a selected bandwidth; an estimate from
        the last subset of queries for more than 4 000 rows; on the binned tier from the
        binned sums, over at most 50 000 rows evenly spread in the order of the inputs).
    irrelevant_features_ : ndarray of bool, shape (n_features,)
        Only with a selected bandwidth: the features whose bandwidth ended on the upper
        edge of the search range (1000 times Scott's). The kernel ignores them: with
        ``degree=0`` the estimate does not depend on them (they are smoothed away); with
        ``degree ≥ 1`` it is a global polynomial in them (0 if they do not matter at
        all). They are reported here, not warned about. A bandwidth on the lower edge
        (the target varies faster than the sample resolves) issues one
        :class:`~kernattn.BandwidthWarning` per fit naming the features.
    degree_ : int
        The degree of the local polynomial fitted (``degree``, with ``"auto"`` resolved; 0
        without a continuous feature).
    held_back_ : float
        The share of the training rows (at most 512 of them, evenly spread in the order of
        their inputs) whose leave-one-out local polynomial is held back: each row fitted
        from the others (its exact duplicates left out with it), as the bandwidth criteria
        see it. On the binned tier with more than 20 000 rows the left-out fits are taken
        from the gridded sums (a row's own share removed in closed form). 0 for the local
        constant. The queries held back in a prediction are counted by that call's
        :class:`~kernattn.LocalDesignWarning`.
    algorithm_ : {"exact", "binned"}
        The tier ``predict`` uses (``algorithm`` with ``"auto"`` resolved).
    grid_shape_ : tuple of int
        Only on the binned tier: the points per feature of the grid over the data's range
        (the sums are kept on it extended by two bandwidths on every side).
    binning_error_ : float
        Only on the binned tier: the first-order bound of the binned estimate's error
        against the exact one at queries within the data's range, relative to the local
        spread of the targets (at most the tolerance: 1e-3, or up to 8e-3 where a finer
        grid would not fit in ``working_memory``; see :mod:`kernattn.smoother._binned.error`).
        Beyond the range the queries are exact.
    exact_cells_ : int
        Only on the binned tier: how many cells of the grid (of the
        :math:`\prod_j (G_j - 1)` cells within the data's range, ``grid_shape_`` giving
        the :math:`G_j`) have their queries computed from the exact kernel because a check
        of the grid found that the binned estimate there could be farther than
        ``binning_error_`` from the exact one: gaps between clusters of data, a sparse
        edge of the design (see :class:`kernattn.smoother._binned.kernel.BinnedKernel`). 0 for a
        design that the grid serves everywhere.
    kernel_ : SoftmaxHeads
        The fitted kernel: one softmax head whose queries and keys are the inputs, centered on
        the training mean and divided by ``bandwidth_``.
    X_fit_, y_fit_, sample_weight_ : ndarray
        The training set (the keys and values the queries attend to).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    Notes
    -----
    The logits come from one matrix product per block of queries, with the expansion
    :math:`\|q - k\|^2 = \|q\|^2 + \|k\|^2 - 2q^\top k` of the inputs centered on the
    training mean and divided by the bandwidth. Their absolute accuracy is about
    :math:`10^{-16} (\text{spread}/h)^2`: predictions agree with a direct computation to
    about 1e-12 for bandwidths above a thousandth of the data's spread, less below that.
    A query whose kernel underflows for every key (far from the data, or outside every
    compact support) is recomputed from logits without its own norm and gets its nearest
    training target (the mean over exact ties), never 0/0.

    See Also
    --------
    kernattn.AttentionRegressor : the same estimate with a learned dot-product kernel.
    kernattn.LinearAttentionRegressor : a random-feature approximation, linear in n.
    sklearn.neighbors.KNeighborsRegressor : the hard (k-nearest) version of the average.

    References
    ----------
    .. [1] E. A. Nadaraya, "On estimating regression", Theory Probab. Appl. 9 (1964).
    .. [2] G. S. Watson, "Smooth regression analysis", Sankhyā A 26 (1964).
    .. [3] J. Fan, I. Gijbels, "Local Polynomial Modelling and Its Applications" (1996).
    .. [4] B. Seifert, T. Gasser, "Finite-sample variance of local polynomials: analysis and
       solutions", J. Amer. Statist. Assoc. 91 (1996).
    .. [5] J. Fan, J. S. Marron, "Fast implementations of nonparametric curve estimators",
       J. Comput. Graph. Statist. 3 (1994).
    .. [6] D. Ruppert, S. J. Sheather, M. P. Wand, "An effective bandwidth selector for
       local least squares regression", J. Amer. Statist. Assoc. 90 (1995).

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import KernelSmoother
    >>> X = np.linspace(0, 1, 50)[:, None]
    >>> y = np.sin(2 * np.pi * X[:, 0])
    >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
    >>> model.predict([[0.25]]).round(2)
    array([0.95])
    >>> print(model.attention_weights([[0.25]]).sum().round(12))
    1.0

    A categorical feature (column 1) gets its own smoothing parameter λ:

    >>> rng = np.random.default_rng(0)
    >>> X = np.column_stack([rng.uniform(0, 1, 200), rng.integers(0, 3, 200)])
    >>> y = X[:, 0] + (X[:, 1] == 2) + 0.1 * rng.normal(size=200)
    >>> model = KernelSmoother(bandwidth="loo", categorical_features=[1]).fit(X, y)
    >>> bool(model.bandwidth_[1] < 0.1)  # the levels differ: little smoothing across them
    True

    The local-linear fit puts its line in the continuous feature; the levels only weigh:

    >>> model = KernelSmoother(bandwidth="loo", degree=1, categorical_features=[1]).fit(X, y)
    >>> model.gradient([[0.5, 2.0]]).round(1)  # the slope in x₀; none for the category
    array([[ 1., nan]])

    Far outside the data a local line is held back toward the local constant, and said so:

    >>> import warnings
    >>> X = np.linspace(0, 1, 50)[:, None]
    >>> y = 3 * X[:, 0]
    >>> line = KernelSmoother(bandwidth=0.05, degree=1).fit(X, y)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     far = line.predict([[0.5], [1.1], [10.0]])
    >>> far.round(2)  # the line inside; shrunk beyond the edge; the nearest target far out
    array([1.5 , 3.13, 3.  ])
    >>> KernelSmoother(bandwidth=0.05).fit(X, y).predict([[1.1]]).round(2)  # local constant
    array([2.97])
    >>> [type(w.message).__name__ for w in caught]
    ['LocalDesignWarning']

    Many rows in one or two features: the sums are binned onto a grid (``"auto"`` chooses
    it where it is cheaper), the bandwidth searched on the bins:

    >>> X = rng.uniform(0, 1, size=(200_000, 1))
    >>> y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.normal(size=200_000)
    >>> model = KernelSmoother(bandwidth="loo", degree=1).fit(X, y)
    >>> model.algorithm_, bool(model.binning_error_ <= 1e-3)
    ('binned', True)
    >>> model.predict([[0.25]]).round(2)
    array([1.])
    """

    _parameter_constraints: dict = {
        **NadarayaWatsonRegressor._parameter_constraints,
        "kernel": [StrOptions(set(KERNELS))],
        "bandwidth": [
            Interval(Real, 0, None, closed="neither"),
            "array-like",
            StrOptions(set(BANDWIDTH_RULES) | set(CRITERIA) | {"plugin"}),
        ],
        "degree": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "algorithm": [StrOptions(set(ALGORITHMS))],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "categorical_features": ["array-like", StrOptions({"from_dtype"}), None],
        "ordinal_features": ["array-like", StrOptions({"from_dtype"}), None],
    }

    def __init__(
        self,
        kernel="gaussian",
        bandwidth="scott",
        degree=0,
        n_jobs=None,
        random_state=None,
        verbose=0,
        categorical_features=None,
        ordinal_features=None,
        algorithm="auto",
    ):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.degree = degree
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.categorical_features = categorical_features
        self.ordinal_features = ordinal_features
        self.algorithm = algorithm

    @fill_doc(fit_returns_and_notes=FIT_RETURNS_AND_NOTES)
    def fit(self, X, y, sample_weight=None):
        """Fit the smoother: select the bandwidth and keep the training set.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training inputs (the keys). float32 input is kept in float32. A dask array or
            dataframe (with the ``dask`` extra): the leave-one-out search of the Gaussian
            local-constant smoother evaluates its criterion on the workers (see
            :ref:`distributed`).
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
            Training targets (the values).
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative. An integer weight is the same as repeating the row: weights count
            observations. So multiplying every weight by a constant changes what depends
            on their number (Scott's and Silverman's rules, the penalties of ``"aic"`` and
            ``"gcv"`` and their cap on ``effective_dof_``, and the held-back rule, whose
            variance is in units of one observation: where weights below 1 put even the
            local constant above its bound, a query gets the local constant; ``"aic"``
            and ``"gcv"`` refuse weights that sum to too few observations for their
            penalty); the leave-one-out criterion (from 2⁻¹⁰⁰⁰ to 2¹⁰⁰⁰) and the local
            constant at a given bandwidth do not depend on it. Weights that are only
            relative (precision weights, whose ratios alone matter) become counts when
            divided by their mean.

        %(fit_returns_and_notes)s
        """
        return super().fit(X, y, sample_weight)

    def _fit_rows(self, rows):
        """The fit on training rows in parts (the partitions of a dask collection).

        The leave-one-out search of the Gaussian local-constant smoother on continuous
        features, for more than 4 000 rows (a search on subsets of the queries), evaluates
        its criterion where the parts are (:meth:`Criterion.on_parts
        <kernattn.bandwidth._criterion.Criterion.on_parts>`); any other bandwidth is found
        as in memory. Then the training set is brought into memory and the smoother fitted
        there at that bandwidth: every method of the fitted smoother (``predict``,
        ``attention_weights``, ``predict_interval``, ``gradient``) reads its rows.
        """
        selection = None
        unsupported = unsupported_on_parts(self.get_params())
        if not unsupported and subset_sizes(rows.n_rows):
            # Read three times (the first pass, the search's parts, the rows brought in):
            # computed once, kept until the fit ends.
            rows = rows.persisted()
            selection = search_on_parts(rows, self.random_state, self.n_jobs, self.verbose)
        X, y, sample_weight = rows.collect()
        searched = isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA
        if searched and unsupported and subset_sizes(len(X)):
            warn_in_memory(unsupported)
        self._fit_arrays(X, y, sample_weight, selection=selection)

    def _fit_kernel(self, X, Y, sample_weight, selection=None):
        self._encoding = mixed_encoding(
            self.categorical_features, self.ordinal_features, X, self._categories, self.kernel
        )
        self._binned = None
        # The columns of the kernel's inputs the local polynomial lives in: all of them, or
        # with discrete features the continuous ones (the levels enter through the weights).
        if self._encoding is None:
            self._line = np.arange(X.shape[1])
        else:
            self._line = self._encoding.line_columns()
        candidates = self._degree_candidates()
        reason = binned_reason(X, self.kernel, self._encoding is not None)
        if self._encoding is not None:
            check_binned_possible(self.algorithm, reason)
            kernel, degree = self._fit_mixed_kernel(X, Y, sample_weight, candidates)
            algorithm = "exact"
        else:
            tier = search_tier(
                self.algorithm, self.bandwidth, self.kernel, X, Y, max(candidates), reason
            )
            if selection is not None:
                h, degree = self._use_selection(selection), 0
            else:
                on_bins = tier == "binned" or search_on_bins(self.bandwidth, len(X), reason)
                h, degree, selection = select_in_units(
                    X, Y, sample_weight, candidates, on_bins, self.get_params()
                )
                if selection is not None:
                    self._use_selection(selection)
            self.bandwidth_ = h
            algorithm, self._tolerance = final_tier(
                self.algorithm, X, h, degree, Y.shape[1], reason
            )
            kernel = self._bandwidth_heads(self.kernel, X, sample_weight, h, Y.shape[1])
        self.degree_ = degree
        self.algorithm_ = algorithm
        values = self._values / self._value_scale
        if degree > 0:
            polynomials = local_polynomials(
                kernel,
                self._value_columns_built,
                values,
                degree,
                self._line,
                sample_weight,
                binned=algorithm == "binned",
            )
            kernel = kernel.with_local([polynomials])
        self.held_back_ = 0.0
        if algorithm == "binned":
            self._binned = BinnedKernel(
                X, values, sample_weight, self.bandwidth_, degree, tol=self._tolerance
            )
            # The kept inputs, for the intervals' noise estimate (_inference).
            self._binned.noise_cache["rows"] = X, sample_weight
            self.grid_shape_ = self._binned.grid_shape
            self.binning_error_ = self._binned.binning_error
            self.exact_cells_ = self._binned.exact_cells
            if degree > 0 and len(X) > _EXACT_HELD_BACK_ROWS:
                self.held_back_ = self._binned.held_back_share(
                    X, values, sample_weight, HELD_BACK_ROWS
                )
            elif degree > 0:
                self.held_back_ = self._held_back_share(kernel, X)
        elif degree > 0:
            inputs = X if self._encoding is None else self._encoding.transform(X)
            self.held_back_ = self._held_back_share(kernel, inputs)
        if np.isnan(getattr(self, "effective_dof_", 0.0)):
            self.effective_dof_ = binned_trace(
                X, values, sample_weight, self.bandwidth_, degree, self._binned, n_jobs=self.n_jobs
            )
        return kernel

    def _head_moments(self, X, h, return_std, exact=None):
        """The engine's hook: on the binned tier the local fit from the gridded sums, the
        rows the grid does not serve (far from the data, held back or near the bound of
        the variance rule) from the exact kernel."""
        binned = getattr(self, "_binned", None)
        if binned is None or exact is not None:
            return super()._head_moments(X, h, return_std, exact)
        exact_moments = super()._head_moments
        return binned.head_moments(
            X,
            return_std,
            lambda queries, *moments: self._accurate_spread(queries, h, *moments),
            lambda queries: exact_moments(queries, h, return_std),
            self.kernel_.n_keys,
        )

    def _block_width(self):
        binned = getattr(self, "_binned", None)
        if binned is not None:
            return 4 * binned.n_columns, None
        return super()._block_width()

    def _degree_candidates(self):
        """The degrees the fit may take: ``degree`` itself, or 0 and 1 for ``"auto"``; a
        local polynomial needs a continuous feature (without one, the local constant)."""
        if isinstance(self.degree, str):
            candidates = (0, 1)
        else:
            candidates = (check_degree(self.degree, len(self._line)),)
        return candidates if len(self._line) else (0,)

    def _use_selection(self, selection, searched=None):
        """The fitted attributes a bandwidth selection reports; its bandwidth. A
        ``BandwidthWarning`` names the features (of ``searched``, default all) whose
        bandwidth ended on the lower edge of the search."""
        if self.bandwidth == "loo":
            self.loo_error_ = selection.value
        else:
            self.criterion_ = selection.value
        self.effective_dof_ = selection.effective_dof
        self.irrelevant_features_ = selection.upper_edge
        lower = selection.lower_edge if searched is None else selection.lower_edge & searched
        names = getattr(self, "feature_names_in_", None)
        warn_lower_edge(self.bandwidth, lower, names)
        return selection.bandwidth

    # --------------------------------------------------------------- inference

    def _inference(self):
        """The fitted smoother as a linear smoother of its training targets (in the engine's
        units: centered targets divided by ``_value_scale``); on the binned tier beyond
        ``_EXACT_HELD_BACK_ROWS`` rows, with the noise estimate from the gridded sums."""
        binned = getattr(self, "_binned", None)
        if binned is not None and "rows" in binned.noise_cache:
            # A binned fit keeps its kept inputs and weights there (the weights are the
            # grid's own): gathering 10⁶ rows from the training set costs more than an
            # interval from the grid.
            keys, sample_weight = binned.noise_cache["rows"]
        else:
            keys, sample_weight = self._training_inputs(), self.sample_weight_[self._active]
        values = self._values / self._value_scale
        common = dict(
            weights=lambda X: self._head_weights(X, 0),
            kernel_weights=lambda X: self.kernel_.weights(X, 0),
            keys=keys,
            values=values,
            sample_weight=sample_weight,
            n_jobs=self.n_jobs,
        )
        if binned is None or len(sample_weight) <= _EXACT_HELD_BACK_ROWS:
            return LinearSmootherInference(**common)
        return BinnedInference(binned=binned, binned_weight=sample_weight, **common)

    # ------------------------------------------------------------- mixed data

    def _fit_mixed_kernel(self, X, Y, sample_weight, candidates):
        """The Gaussian kernel of the encoded inputs (see :mod:`kernattn.bandwidth._mixed`)
        and the degree of the local polynomial in the continuous features."""
        encoding = self._encoding
        Z = encoding.transform(X)
        self.bandwidth_, degree, selection = select_mixed(
            encoding, X, Z, Y, sample_weight, candidates, self.get_params()
        )
        if selection is not None:
            # λ = 0 (no smoothing across levels) is an answer; a continuous bandwidth on
            # the lower edge is not.
            self._use_selection(selection, searched=~encoding.discrete)
        scales = encoding.column_scales(self.bandwidth_)
        kernel = self._bandwidth_heads("gaussian", Z, sample_weight, scales, Y.shape[1])
        return kernel, degree

    def _bandwidth_heads(self, profile, keys, sample_weight, bandwidth, n_outputs):
        """The smoother's kernel (:func:`~kernattn.smoother._kernel.bandwidth_heads`)."""
        return bandwidth_heads(
            profile,
            keys,
            sample_weight,
            bandwidth,
            n_outputs,
            self._log_sample_weight,
            self._dtype,
        )

    def _kernel_chosen_with_targets(self):
        # A float bandwidth is fixed, and the normal-reference rules read the inputs only.
        searched = isinstance(self.bandwidth, str) and self.bandwidth not in ("scott", "silverman")
        return searched or self.degree == "auto"

    def _training_inputs(self):
        """The positive-weight training inputs as the kernel sees them (encoded, with
        discrete features)."""
        X = self.X_fit_[self._active]
        return X if self._encoding is None else self._encoding.transform(X)

    def _validate_training_data(self, X, y, sample_weight, reset=True):
        # Pandas categoricals become their codes before scikit-learn's checks (which want
        # numbers); the categories are kept to code the queries alike.
        if reset:
            self._categories = dtype_categories(
                X, self.categorical_features, self.ordinal_features
            )
        X = categorical_codes(X, self._categories)
        return super()._validate_training_data(X, y, sample_weight, reset)

    def _validate_queries(self, X):
        check_is_fitted(self)
        X = super()._validate_queries(categorical_codes(X, self._categories))
        return X if self._encoding is None else self._encoding.transform(X)
