r"""``KernelSmoother``: the classical Nadaraya–Watson (and local-linear) kernel smoother.

The Gaussian smoother is softmax attention in disguise: with :math:`q = x/h`, :math:`k = x_i/h`,

.. math::

    -\tfrac12 \|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2,

and the last term depends on the query only, so it cancels in the softmax: the weights are
``softmax(q·k − ½‖k‖²)``, dot-product attention with scale 1 and a key bias. The bandwidth
rules and the leave-one-out search live in :mod:`kernattn.bandwidth`.
"""

import math
import time
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from kernattn._core.blocks import iter_query_blocks
from kernattn._core.namespaces import in_caller_library
from kernattn._core.numerics import power_of_two_scale, weighted_mean
from kernattn._engine.heads import SoftmaxHeads
from kernattn._engine.inference import (
    INTERVAL_METHODS,
    NOISE_ESTIMATES,
    LinearSmootherInference,
    nadaraya_watson_gradient_weights,
    normal_quantile,
)
from kernattn._engine.regressor import HELD_BACK_ROWS, NadarayaWatsonRegressor
from kernattn._engine.summary import RowSummary, check_summary, sample_seed, summarize
from kernattn._local.fits import LocalPolynomials
from kernattn._local.polynomial import check_degree
from kernattn.bandwidth import (
    BANDWIDTH_RULES,
    CRITERIA,
    BandwidthWarning,
    resolve_bandwidth,
    select_bandwidth,
)
from kernattn.bandwidth._criterion import Criterion
from kernattn.bandwidth._mixed import (
    MixedEncoding,
    categorical_codes,
    dtype_categories,
    mixed_bandwidth,
    resolve_feature_kinds,
    select_mixed_bandwidth,
)
from kernattn.bandwidth._search import edge_message, search_criterion, subset_sizes
from kernattn.kernels import KERNELS
from kernattn.smoother._binned.binning import bin_targets
from kernattn.smoother._binned.checks import MAX_DIMS
from kernattn.smoother._binned.cost import choose_algorithm
from kernattn.smoother._binned.error import TOLERANCE
from kernattn.smoother._binned.grid import make_grid
from kernattn.smoother._binned.kernel import (
    BinnedInference,
    BinnedKernel,
    DeferredLocalPolynomials,
)
from kernattn.smoother._binned.moments import grid_sums
from kernattn.smoother._binned.plugin import plugin_bandwidth
from kernattn.smoother._binned.search import (
    COARSE_TOLERANCE,
    SEARCH_TOLERANCE,
    BinnedCriterion,
    search_bandwidth,
)
from kernattn.smoother._binned.statistics import row_statistics

#: The values of ``algorithm``.
ALGORITHMS = ("auto", "exact", "binned")
#: ``algorithm="auto"`` keeps the exact sums below this many training rows: they take well
#: under a second there, and small fits stay exact to rounding.
AUTO_MIN_ROWS = 10_000
#: The binned tier's grid meets ``TOLERANCE`` (1e-3), or where that grid would exceed
#: ``working_memory`` the smallest power-of-two multiple up to this that fits.
MAX_TOLERANCE = 8e-3
#: Beyond this many rows (one or two continuous features, Gaussian kernel) a criterion is
#: searched on binned sums over every row even with ``algorithm="exact"``: the exact
#: search on 2 400 sampled queries then picks bandwidths several times too small (at 10⁶
#: rows of sin 2πx plus noise, 0.0014 and 0.00036 by seed against a best of 0.0035).
EXACT_SEARCH_ROWS = 100_000
#: ``effective_dof_`` on the binned tier sums the trace over at most this many rows.
TRACE_ROWS = 50_000
#: Up to this many training rows the binned tier measures ``held_back_`` on the exact
#: kernel (at most 512 rows against every key), and the noise estimate of
#: ``predict_interval`` and ``gradient`` from every row's exact weights; beyond, both on
#: the gridded sums.
_EXACT_HELD_BACK_ROWS = 20_000


class KernelSmoother(NadarayaWatsonRegressor):
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
        the cost model of :func:`kernattn.smoother._binned.grid.choose_algorithm` (for predicting
        the
        training rows, at the normal-reference bandwidth and then at ``bandwidth_``) says
        it is cheaper, from 10 000 training rows; the exact tier otherwise (below that the
        exact sums are fast, and small fits stay exact to rounding). ``predict`` (with
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
        grid would not fit in ``working_memory``; see :mod:`kernattn.smoother._binned.grid`).
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
            local constant above its bound, a query gets the local constant); the
            leave-one-out criterion and the local constant at a given bandwidth do not
            depend on it.

        Returns
        -------
        self : object
            The fitted estimator.

        Notes
        -----
        The rows are fitted in an order set by their contents (sorted by inputs, targets
        and weights): any permutation of them gives the same fit and the same predictions,
        to the last bit.
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
        unsupported = self._unsupported_on_parts()
        if not unsupported and subset_sizes(rows.n_rows):
            # Read three times (the first pass, the search's parts, the rows brought in):
            # computed once, kept until the fit ends.
            rows = rows.persisted()
            selection = self._search_on_parts(rows)
        X, y, sample_weight = rows.collect()
        searched = isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA
        if searched and unsupported and subset_sizes(len(X)):
            warnings.warn(
                f"KernelSmoother: {unsupported}; only the leave-one-out search of the "
                "Gaussian local-constant smoother (bandwidth='loo', kernel='gaussian', "
                "degree=0, continuous features) evaluates its criterion where the rows "
                "are. This search runs in memory, on the training set brought from the "
                "partitions.",
                UserWarning,
                stacklevel=4,
            )
        self._fit_arrays(X, y, sample_weight, selection=selection)

    def _unsupported_on_parts(self):
        """Why the bandwidth is not searched where the rows are (``""``: it is)."""
        if not (isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA):
            return "no search"
        reasons = []
        if self.bandwidth != "loo":
            reasons.append(f"bandwidth={self.bandwidth!r}")
        if self.kernel != "gaussian":
            reasons.append(f"kernel={self.kernel!r}")
        if self.degree != 0:
            reasons.append(f"degree={self.degree!r}")
        for name in ("categorical_features", "ordinal_features"):
            if getattr(self, name) is not None:
                reasons.append(f"{name} given")
        return ", ".join(reasons)

    def _search_on_parts(self, rows):
        """The leave-one-out bandwidth search with the criterion's sums taken where the
        parts are: a first pass takes the statistics of the rows of positive weight and a
        uniform sample of queries (:mod:`kernattn._engine.summary`), whose first 600 and then all
        2 400 rows are the nested subsets of the in-memory search; the search's steps are
        the in-memory search's (:func:`~kernattn.bandwidth.search_criterion`). ``None``
        when the rows of positive weight are too few for a search on subsets: then the
        exact search runs in memory, as for arrays."""
        started = time.perf_counter()
        n_sample = subset_sizes(rows.n_rows)[-1]
        summary = rows.reduce(
            summarize, RowSummary.merge, sample_seed(self.random_state), n_sample
        )
        check_summary(summary)
        sizes = subset_sizes(summary.count)
        if not sizes:
            return None
        if self.verbose >= 1:
            print(
                f"[bandwidth='loo' on {rows.n_parts} partitions "
                f"{time.perf_counter() - started:7.2f} s] first pass: {summary.count} rows, "
                f"{sizes[-1]} queries sampled on the workers; the partitions stay there, "
                "centered, during the search"
            )
        criterion = Criterion.on_parts(rows, summary, n_jobs=self.n_jobs)
        try:
            stages = [np.arange(size) for size in sizes]
            return search_criterion(
                criterion, criterion.scott, stages, "loo", "gaussian", self.verbose
            )
        finally:
            criterion.release()

    def _fit_kernel(self, X, Y, sample_weight, selection=None):
        self._encoding = self._mixed_encoding(X)
        self._binned = None
        # The columns of the kernel's inputs the local polynomial lives in: all of them, or
        # with discrete features the continuous ones (the levels enter through the weights).
        if self._encoding is None:
            self._line = np.arange(X.shape[1])
        else:
            self._line = self._encoding.line_columns()
        candidates = self._degree_candidates()
        if self._encoding is not None:
            self._check_binned_possible(X)
            if isinstance(self.bandwidth, str) and self.bandwidth == "plugin":
                raise ValueError(
                    "bandwidth='plugin' (the direct plug-in of local-linear regression) "
                    "needs one continuous feature; categorical_features or "
                    "ordinal_features were given"
                )
            kernel, degree = self._fit_mixed_kernel(X, Y, sample_weight, candidates)
            algorithm = "exact"
        else:
            tier = self._search_tier(X, Y, candidates)
            if selection is not None:
                h, degree = self._use_selection(selection), 0
            else:
                h, degree = self._select_in_units(X, Y, sample_weight, candidates, tier)
            self.bandwidth_ = h
            algorithm = self._final_tier(X, Y, h, degree)
            # Center before scaling: distances are translation invariant, their expansion
            # ‖q‖² + ‖k‖² − 2qᵀk is not (data near 1e6 would lose every digit).
            kernel = self._bandwidth_heads(self.kernel, X, sample_weight, h, Y.shape[1])
        self.degree_ = degree
        self.algorithm_ = algorithm
        self.held_back_ = 0.0
        if degree > 0:
            values = self._values / self._value_scale
            if algorithm == "binned":
                polynomials = DeferredLocalPolynomials(
                    kernel, self._value_columns_built, values, degree, self._line, sample_weight
                )
            else:
                polynomials = LocalPolynomials(
                    kernel.keys(0),
                    self._value_columns,
                    values,
                    degree,
                    dims=self._line,
                    sample_weight=sample_weight,
                )
            kernel = kernel.with_local([polynomials])
        if algorithm == "binned":
            self._binned = BinnedKernel(
                X,
                self._values / self._value_scale,
                sample_weight,
                self.bandwidth_,
                degree,
                tol=self._tolerance,
            )
            self.grid_shape_ = self._binned.grid_shape
            self.binning_error_ = self._binned.binning_error
            self.exact_cells_ = self._binned.exact_cells
            if degree > 0 and len(X) > _EXACT_HELD_BACK_ROWS:
                self.held_back_ = self._binned_held_back_share(X, sample_weight)
            elif degree > 0:
                self.held_back_ = self._held_back_share(kernel, X)
        elif degree > 0:
            inputs = X if self._encoding is None else self._encoding.transform(X)
            self.held_back_ = self._held_back_share(kernel, inputs)
        if np.isnan(getattr(self, "effective_dof_", 0.0)):
            self.effective_dof_ = self._binned_trace(X, sample_weight)
        return kernel

    def _select_in_units(self, X, Y, sample_weight, candidates, tier):
        """The bandwidth and degree, selected on the inputs and the targets each divided
        by a power of two near its largest magnitude (per feature for the inputs), then
        the bandwidth multiplied back (a given bandwidth is used as it is).

        Dividing by a power of two is exact, so the selection does not depend on the units
        of ``X`` or ``y`` (to the last bit, short of the subnormal range), and data near the
        ends of the float range (2⁻¹⁰⁰⁰ or 2¹⁰⁰⁰ times ordinary ones) are searched in the
        time, and with the result, of ordinary ones: no square or sum overflows, none
        underflows. The criterion's value is reported in the targets' units.
        """
        method = self.bandwidth if isinstance(self.bandwidth, str) else None
        if method is None:
            # A given bandwidth is in the units of X.
            x_unit, y_unit = np.ones(X.shape[1]), 1.0
        else:
            x_unit = power_of_two_scale(X, axis=0)
            y_unit = float(power_of_two_scale(Y))
            X, Y = X / x_unit, Y / y_unit
        if tier == "binned" or self._search_on_bins(X):
            h, degree = self._select_binned(X, Y, sample_weight, candidates)
        else:
            h, degree = self._select_bandwidth(X, Y, sample_weight, candidates)
        if method == "loo":
            self.loo_error_ = _times_square(self.loo_error_, y_unit)
        elif method in CRITERIA:
            if method == "aic":
                self.criterion_ = self.criterion_ + 2.0 * math.log(y_unit)
            else:
                self.criterion_ = _times_square(self.criterion_, y_unit)
        return h * x_unit, degree

    # ------------------------------------------------------------ binned tier

    def _binned_reason(self, X):
        """Why the binned tier cannot fit ``X`` (``""``: it can)."""
        if self._encoding is not None:
            return (
                "the binned sums are for continuous features only (categorical_features "
                "or ordinal_features were given)"
            )
        if self.kernel != "gaussian":
            return (
                f"the binned sums are for the Gaussian kernel (the sums of a local "
                f"polynomial as convolutions of its moments); got kernel={self.kernel!r}"
            )
        if not 1 <= X.shape[1] <= MAX_DIMS:
            return (
                f"the binned sums support 1 or {MAX_DIMS} features (a grid has G^d "
                f"points); X has {X.shape[1]}"
            )
        if not np.all(np.ptp(X, axis=0) > 0):
            return "every feature must vary in the training set to put a grid on it"
        return ""

    def _search_on_bins(self, X):
        """Whether an exact-tier criterion is searched on binned sums over every row: for
        more than ``EXACT_SEARCH_ROWS`` rows, where the exact search would evaluate it on
        2 400 sampled queries only (too noisy there to find the minimum)."""
        return (
            isinstance(self.bandwidth, str)
            and self.bandwidth in CRITERIA
            and len(X) > EXACT_SEARCH_ROWS
            and not self._binned_reason(X)
        )

    def _check_binned_possible(self, X):
        """A ``ValueError`` for ``algorithm="binned"`` where the tier cannot fit ``X``."""
        if self.algorithm == "binned":
            reason = self._binned_reason(X)
            if reason:
                raise ValueError(
                    f"algorithm='binned' is not possible here: {reason}. Use "
                    "algorithm='exact' (or 'auto', which chooses it)."
                )

    def _search_tier(self, X, Y, candidates):
        r"""The tier the bandwidth is selected on: ``"binned"`` for ``algorithm="binned"``,
        for ``"auto"`` where the cost model prefers the binned sums at the normal-reference
        bandwidth :math:`\sigma_j n^{-1/(d+4)}` (or at the given bandwidth) for predicting
        the training rows."""
        self._check_binned_possible(X)
        if self.algorithm == "exact" or self._binned_reason(X):
            return "exact"
        if self.algorithm == "binned":
            return "binned"
        if len(X) < AUTO_MIN_ROWS:
            return "exact"
        if isinstance(self.bandwidth, str):
            unit = power_of_two_scale(X, axis=0)
            h = np.std(X / unit, axis=0) * len(X) ** (-1.0 / (X.shape[1] + 4)) * unit
        else:
            h = self._given_bandwidth(X, Y)
            if h is None:
                return "exact"
        return self._cheaper(X, h, max(candidates), Y.shape[1])

    @staticmethod
    def _cheaper(X, h, degree, n_outputs):
        """:func:`~kernattn.smoother._binned.grid.choose_algorithm` for predicting the training
        rows, at
        the tolerance or, where that grid does not fit in memory, at ``MAX_TOLERANCE`` (in
        units of a power of two per input, where no square or sum overflows)."""
        unit = power_of_two_scale(X, axis=0)
        for tol in (TOLERANCE, MAX_TOLERANCE):
            choice = choose_algorithm(
                X / unit, h / unit, len(X), degree=degree, n_outputs=2 * n_outputs, tol=tol
            )
            if choice == "binned":
                return choice
        return "exact"

    def _given_bandwidth(self, X, Y):
        """A numeric ``bandwidth`` as one per feature, or ``None`` if it is not valid (the
        exact path then says why)."""
        try:
            return resolve_bandwidth(self.bandwidth, X, Y, None, self.kernel)[0]
        except (ValueError, TypeError):
            return None

    def _final_tier(self, X, Y, h, degree):
        """The tier of the fitted smoother at its bandwidth ``h``: binned where the search
        tier was (or ``algorithm="auto"`` prefers it now) and its grid fits in
        ``working_memory``."""
        if self.algorithm == "exact" or self._binned_reason(X):
            return "exact"
        t = Y.shape[1]
        if self.algorithm == "auto":
            if len(X) < AUTO_MIN_ROWS:
                return "exact"
            chosen = self._cheaper(X, h, degree, t)
            return chosen if chosen == "exact" else self._fits_or(X, h, degree, t, "exact")
        return self._fits_or(X, h, degree, t, None)

    def _fits_or(self, X, h, degree, t, fallback):
        """``"binned"`` with the smallest tolerance (``TOLERANCE`` times a power of two, at
        most ``MAX_TOLERANCE``) whose grid fits in ``working_memory``, kept for the fit;
        otherwise ``fallback``, or a ``ValueError`` without one."""
        tol = TOLERANCE
        while tol <= MAX_TOLERANCE * (1 + 1e-9):
            if BinnedKernel.fits(X, h, degree, t, tol=tol):
                self._tolerance = tol
                return "binned"
            tol *= 2.0
        if fallback is not None:
            return fallback
        raise ValueError(
            f"algorithm='binned' is not possible here: the grid for the bandwidth "
            f"{np.array2string(np.asarray(h), precision=4)} at the binning tolerance "
            f"{MAX_TOLERANCE:g} needs more memory than working_memory allows (a bandwidth "
            "far below the data's range). Use algorithm='exact' or 'auto', or raise "
            "sklearn's working_memory."
        )

    def _select_binned(self, X, Y, sample_weight, candidates):
        """The bandwidth and degree on the binned tier: a criterion searched on the binned
        sums (:func:`~kernattn.smoother._binned.search.search_bandwidth`, every row, O(G log G + n)
        per bandwidth), the plug-in, a rule or the given bandwidth."""
        weights = None if np.all(sample_weight == sample_weight[0]) else sample_weight
        if isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA:
            searches = [
                search_bandwidth(
                    X,
                    Y,
                    weights,
                    degree=p,
                    criterion=self.bandwidth,
                    tol=SEARCH_TOLERANCE if X.shape[1] == 1 else COARSE_TOLERANCE,
                    n_jobs=self.n_jobs,
                )
                for p in candidates
            ]
            best = _first_lowest([search.value for search in searches])
            search, degree = searches[best], candidates[best]
            if self.bandwidth == "loo":
                self.loo_error_ = search.value
            else:
                self.criterion_ = search.value
            top = search.factors[-1] * search.reference
            low = search.factors[0] * search.reference
            self.irrelevant_features_ = search.at_edge & (search.bandwidth >= top * 0.999)
            lower = search.at_edge & (search.bandwidth <= low * 1.001)
            # effective_dof_ once the tier is known (the binned fit's own sums serve it).
            self.effective_dof_ = np.nan
            self._warn_lower_edge(lower)
            return search.bandwidth, degree
        h = self._rule_bandwidth(X, Y, sample_weight)
        if len(candidates) == 1:
            return h, candidates[0]
        # degree="auto" at a given bandwidth: the lower binned leave-one-out error.
        losses = []
        for p in candidates:
            criterion = BinnedCriterion(
                X,
                Y,
                weights,
                degree=p,
                criterion="loo",
                min_bandwidth=h,
                levels=0,
                tol=SEARCH_TOLERANCE,
                n_jobs=self.n_jobs,
            )
            losses.append(criterion(h, SEARCH_TOLERANCE))
        return h, candidates[_first_lowest(losses)]

    def _binned_trace(self, X, sample_weight):
        """tr S, the effective degrees of freedom at ``bandwidth_``, from binned sums (the
        fit's, or on the exact tier sums at the search's tolerance): summed over at most
        ``TRACE_ROWS`` rows evenly spread in the order of the inputs, scaled to all of
        them."""
        values = self._values[:, :1] / self._value_scale[:1]
        weights = None if np.all(sample_weight == sample_weight[0]) else sample_weight
        # In units of a power of two per input, as the binned sums are (exact).
        unit = power_of_two_scale(X, axis=0)
        X = X / unit
        h, degree = self.bandwidth_ / unit, self.degree_
        if self._binned is not None:
            sums = self._binned.sums
            values = self._values / self._value_scale
        else:
            grid = make_grid(X, h, degree=degree, tol=SEARCH_TOLERANCE)
            sums = grid_sums(bin_targets(X, values, grid, weights), h, degree)
        rows = np.unique(np.linspace(0, len(X) - 1, min(len(X), TRACE_ROWS)).round())
        rows = rows.astype(int)
        w = None if weights is None else weights[rows]
        stats = row_statistics(sums, X[rows], values[rows], w, n_jobs=self.n_jobs)
        total = len(X) if weights is None else float(weights.sum())
        return stats.trace * total / stats.total

    def _rule_bandwidth(self, X, Y, sample_weight):
        """A rule's, the plug-in's or the given bandwidth, one per feature."""
        if isinstance(self.bandwidth, str) and self.bandwidth == "plugin":
            return self._plugin_bandwidth(X, Y, sample_weight)
        rules = BANDWIDTH_RULES + CRITERIA[1:]
        return resolve_bandwidth(self.bandwidth, X, Y, sample_weight, self.kernel, rules=rules)[0]

    def _plugin_bandwidth(self, X, Y, sample_weight):
        """The direct plug-in bandwidth of local-linear regression (KernSmooth's dpill)."""
        problems = []
        if X.shape[1] != 1:
            problems.append(f"one feature (X has {X.shape[1]})")
        if Y.shape[1] != 1:
            problems.append(f"one output (y has {Y.shape[1]})")
        if not np.all(sample_weight == sample_weight[0]):
            problems.append("no sample weights")
        if problems:
            raise ValueError(
                "bandwidth='plugin' (the direct plug-in of local-linear regression, "
                f"Ruppert, Sheather and Wand 1995) needs {', '.join(problems)}; use "
                "bandwidth='loo', 'aic' or 'gcv' instead"
            )
        return np.array([plugin_bandwidth(X[:, 0], Y[:, 0])])

    def _binned_held_back_share(self, X, sample_weight):
        """``held_back_`` on the binned tier: the rows of :meth:`_held_back_share`, each
        left out with its exact duplicates from the gridded sums
        (:meth:`BinnedKernel.held_back_rows`)."""
        n = len(X)
        if n < 2:
            return 0.0
        rows = np.unique(np.linspace(0, n - 1, min(n, HELD_BACK_ROWS)).round().astype(int))
        # Exact duplicates are adjacent: the rows are in canonical order, sorted by inputs.
        first = np.ones(n, dtype=bool)
        first[1:] = np.any(X[1:] != X[:-1], axis=1)
        group = np.cumsum(first) - 1
        values = self._values / self._value_scale
        own_weight = np.bincount(group, sample_weight)[group[rows]]
        own_values = np.column_stack(
            [
                np.bincount(group, sample_weight * values[:, o])[group[rows]]
                for o in range(values.shape[1])
            ]
        )
        held_back, alone = self._binned.held_back_rows(X[rows], own_weight, own_values)
        counted = ~alone
        return float(held_back[counted].mean()) if np.any(counted) else 0.0

    def _head_moments(self, X, h, return_std, exact=None):
        """The engine's hook: on the binned tier the local fit from the gridded sums, the
        rows the grid does not serve (far from the data, held back or near the bound of
        the variance rule) from the exact kernel."""
        binned = getattr(self, "_binned", None)
        if binned is None or exact is not None:
            return super()._head_moments(X, h, return_std, exact)
        mean, second, ybar, redo = binned.moments(X, return_second=return_std)
        spread = None
        if return_std:
            spread = np.maximum(second - ybar**2 + (ybar - mean) ** 2, 0.0)
            served = np.flatnonzero(~redo)
            if len(served):
                spread[served] = self._accurate_spread(
                    X[served], h, mean[served], spread[served], second[served]
                )
        held_back = np.zeros(len(X), dtype=bool)
        rows = np.flatnonzero(redo)
        for block in iter_query_blocks(len(rows), self.kernel_.n_keys):
            part = rows[block]
            m, s, held = super()._head_moments(X[part], h, return_std)
            mean[part] = m
            if return_std:
                spread[part] = s
            if held is not None:
                held_back[part] = held
        return mean, spread, held_back

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

    def _select_bandwidth(self, X, Y, sample_weight, candidates):
        """The bandwidth and the degree (and, for the selectors, the fitted attributes they
        report)."""
        if not (isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA):
            h = self._rule_bandwidth(X, Y, sample_weight)
            if len(candidates) == 1:
                return h, candidates[0]
            objectives = [
                Criterion(X, Y, sample_weight, self.kernel, degree=p, n_jobs=self.n_jobs)
                for p in candidates
            ]
            if objectives[0].n_groups < 2:
                # One distinct input: leaving it out leaves no key, and every error is 0/0.
                return h, candidates[0]
            return h, _lowest_leave_one_out(objectives, np.log(h), candidates)
        random_state = _paired_random_state(self.random_state, len(candidates))
        selections = [
            select_bandwidth(
                X,
                Y,
                sample_weight,
                self.kernel,
                criterion=self.bandwidth,
                degree=p,
                n_jobs=self.n_jobs,
                random_state=random_state,
                verbose=self.verbose,
            )
            for p in candidates
        ]
        best = _first_lowest([selection.value for selection in selections])
        return self._use_selection(selections[best]), candidates[best]

    def _use_selection(self, selection):
        """The fitted attributes a bandwidth selection reports; its bandwidth."""
        if self.bandwidth == "loo":
            self.loo_error_ = selection.value
        else:
            self.criterion_ = selection.value
        self.effective_dof_ = selection.effective_dof
        self.irrelevant_features_ = selection.upper_edge
        self._warn_lower_edge(selection.lower_edge)
        return selection.bandwidth

    def _warn_lower_edge(self, lower):
        """A ``BandwidthWarning`` naming the features whose selected bandwidth ended on the
        lower edge of the search (``lower``: a boolean per feature), if any."""
        if np.any(lower):
            features = self._feature_labels(np.flatnonzero(lower))
            warnings.warn(
                edge_message(self.bandwidth, features, "lower"), BandwidthWarning, stacklevel=5
            )

    def _feature_labels(self, indices):
        """Feature indices, with their names where ``X`` had column names."""
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return indices.tolist()
        return [f"{i} ({names[i]})" for i in indices]

    # --------------------------------------------------------------- inference

    def _inference(self):
        """The fitted smoother as a linear smoother of its training targets (in the engine's
        units: centered targets divided by ``_value_scale``); on the binned tier beyond
        ``_EXACT_HELD_BACK_ROWS`` rows, with the noise estimate from the gridded sums."""
        sample_weight = self.sample_weight_[self._active]
        common = dict(
            weights=lambda X: self._head_weights(X, 0),
            kernel_weights=lambda X: self.kernel_.weights(X, 0),
            keys=self._training_inputs(),
            values=self._values / self._value_scale,
            sample_weight=sample_weight,
            n_jobs=self.n_jobs,
        )
        binned = getattr(self, "_binned", None)
        if binned is None or len(sample_weight) <= _EXACT_HELD_BACK_ROWS:
            return LinearSmootherInference(**common)
        return BinnedInference(
            binned=binned, binned_weight=sample_weight, tolerance=self._tolerance, **common
        )

    def _target_units(self, a, trailing=()):
        """Engine units (n_queries, *trailing, n_outputs) to the targets' units, shaped like
        ``predict``'s output with ``trailing`` axes after the query axis."""
        a = a * self._value_scale
        return a.reshape((len(a),) + trailing + self._target_shape).astype(self._dtype)

    @in_caller_library
    def predict_interval(
        self,
        X,
        alpha=0.05,
        *,
        method="analytic",
        noise="local",
        n_bootstrap=1000,
        random_state=None,
    ):
        r"""Pointwise confidence intervals for the smoothed mean :math:`\mathbb E\,\hat y(x)`.

        The estimate is linear in the targets, :math:`\hat y(x) = \sum_i l_i(x)\, y_i`
        (:math:`l` the Nadaraya–Watson weights, or the local-linear equivalent kernel), so
        with independent noise of variance :math:`\sigma^2(x_i)/s_i` (:math:`s_i` the sample
        weights, read as precision weights)

        .. math::

            \operatorname{Var} \hat y(x) = \sum_i l_i(x)^2\, \sigma^2(x_i) / s_i,

        and the analytic interval is :math:`\hat y(x) \pm z_{1-\alpha/2}
        \sqrt{\operatorname{Var} \hat y(x)}` with the normal quantile. The noise
        :math:`\sigma^2` is estimated from the training residuals :math:`e = y - Sy`,
        corrected for the shrinkage of residuals by the smoother: ``noise="global"`` pools
        them, :math:`\hat\sigma^2 = \mathrm{RSS} / (n - 2\operatorname{tr} S +
        \operatorname{tr} S^\top S)`; ``noise="local"`` (the default) smooths the squared
        residuals with the fit's kernel weights, and so follows a noise level that changes
        with :math:`x`.

        **The smoothing bias is not included.** These intervals cover the smoothed mean
        :math:`\mathbb E\,\hat y(x)` (the true function convolved with the kernel), not the
        true regression function :math:`m(x)`: where the bandwidth is large compared with the
        curvature of :math:`m` (peaks, valleys, the edges of the data for ``degree=0``), they
        are centred off :math:`m(x)` and cover it less often than nominal. A smaller bandwidth
        trades bias for width. Nor do they include the uncertainty of a data-driven bandwidth:
        the bandwidth is held at ``bandwidth_``.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        alpha : float, default=0.05
            One minus the nominal coverage of each interval (0.05: 95 % intervals).
        method : {"analytic", "bootstrap"}, default="analytic"
            ``"analytic"``: normal intervals from the variance above. ``"bootstrap"``: basic
            bootstrap intervals :math:`[\hat y - q_{1-\alpha/2}, \hat y - q_{\alpha/2}]`,
            with :math:`q` the quantiles of :math:`\sum_i l_i(x)\, e^*_i` over
            ``n_bootstrap`` draws of bootstrap errors :math:`e^*`, the bandwidth held fixed
            at ``bandwidth_`` (so no replicate is refitted: the smoother is linear).
        noise : {"local", "global"}, default="local"
            The noise model. With ``method="analytic"``, the noise estimate above. With
            ``method="bootstrap"``: ``"local"`` is the wild bootstrap (each rescaled
            residual keeps its row and gets a random sign), ``"global"`` the residual
            bootstrap (the pooled, centred, rescaled residuals are resampled).
        n_bootstrap : int, default=1000
            Bootstrap replicates (only with ``method="bootstrap"``).
        random_state : int, RandomState instance or None, default=None
            The bootstrap draws (only with ``method="bootstrap"``).

        Returns
        -------
        lower, upper : ndarray of shape (n_queries,) or (n_queries, n_outputs)
            The interval's ends, shaped like :meth:`predict`'s output.

        See Also
        --------
        predict : with ``return_std=True``, the spread of the targets around the estimate
            (how much the neighbours disagree), not the uncertainty of the estimate.
        gradient : marginal effects and their standard errors.

        Notes
        -----
        The noise estimate makes one pass of the training set against itself (two for
        ``noise="local"``), :math:`O(n^2 d)`, on every call: ask for many queries at once.
        Residuals of a nearly interpolating fit carry no information about the noise; a
        fit whose residual degrees of freedom vanish raises a ``ValueError``.

        References
        ----------
        .. [1] L. Wasserman, "All of Nonparametric Statistics", Springer (2006), §5.7.
        .. [2] D. Ruppert, M. P. Wand, R. J. Carroll, "Semiparametric Regression",
           Cambridge University Press (2003), §6.4.
        .. [3] E. Mammen, "Bootstrap and wild bootstrap for high dimensional linear
           models", Ann. Statist. 21 (1993).

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(0, 1, size=(200, 1))
        >>> y = np.sin(2 * np.pi * X[:, 0]) + 0.1 * rng.normal(size=200)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> lower, upper = model.predict_interval([[0.25], [0.5]])
        >>> bool(np.all(lower < model.predict([[0.25], [0.5]])))
        True
        >>> (upper - lower).round(2)
        array([0.08, 0.08])
        """
        _check_inference_params(alpha=alpha, method=method, noise=noise, n_bootstrap=n_bootstrap)
        X = self._validate_queries(X)
        mean, _ = self._predict_centered(X, return_std=False)
        mean = mean.astype(np.float64)
        inference = self._inference()
        if method == "analytic":
            half = normal_quantile(alpha) * np.sqrt(inference.mean_variance(X, noise))
            low, high = -half, half
        else:
            q_low, q_high = inference.bootstrap_deviation_quantiles(
                X, alpha, noise, n_bootstrap, random_state
            )
            low, high = -q_high, -q_low  # the basic bootstrap interval

        def finish(a):
            return self._finish_prediction(a.astype(self._dtype), None)

        return finish(mean + low), finish(mean + high)

    @in_caller_library
    def gradient(self, X, return_std=False, *, noise="local"):
        r"""Marginal effects :math:`\partial \hat y / \partial x_j` at each query.

        For ``degree=0`` the exact derivative of the Nadaraya–Watson estimate: with
        :math:`w_i = s_i\kappa_i / \sum_k s_k\kappa_k` and :math:`a_{ij} = \partial \log
        \kappa_i / \partial x_j`,

        .. math::

            \frac{\partial \hat y}{\partial x_j} = \sum_i w_i\, (a_{ij} - \bar a_j)\, y_i,
            \qquad \bar a_j = \sum_k w_k a_{kj};

        for the Gaussian kernel :math:`a_{ij} = (x_{ij} - x_j)/h_j^2` and this is
        :math:`\sum_i w_i (y_i - \hat y)(x_{ij} - x_j)/h_j^2`; the compact kernels use
        their own derivative (0 outside the support). For ``degree ≥ 1`` the slope at the
        query of the local weighted least-squares polynomial (for ``degree=1`` the marginal
        effect of local-linear regression, as in R's ``np`` and statsmodels' ``KernelReg``),
        solved as the fit is: a direction without local spread gets slope 0. The ridge of
        a held-back query is not applied to its slope: it bounds the variance of the
        estimate's level, and a line's slope does not depend on where the query lies (from
        degree 2 the slope outside the data extrapolates the polynomial's derivative, and
        its standard error says by how much).

        Both are linear in the targets, :math:`\sum_i g_{ij}(x)\, y_i`, so their variance
        is :math:`\sum_i g_{ij}(x)^2 \sigma^2(x_i)/s_i` with the noise estimate of
        :meth:`predict_interval`. As there, the smoothing bias (which is larger for
        derivatives than for the estimate) is not included.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        return_std : bool, default=False
            Also return the standard errors of the marginal effects.
        noise : {"local", "global"}, default="local"
            The noise estimate of the standard errors (see :meth:`predict_interval`).

        Returns
        -------
        gradient : ndarray of shape (n_queries, n_features) or (n_queries, n_features, n_outputs)
            In units of the targets per unit of each feature. NaN for categorical and ordinal
            features, which have no derivative (compare predictions at two levels instead).
        gradient_std : ndarray of the same shape
            Only when ``return_std=True``.

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> X = np.linspace(0, 1, 101)[:, None]
        >>> y = 3 * X[:, 0] ** 2
        >>> model = KernelSmoother(bandwidth=0.05, degree=1).fit(X, y)
        >>> model.gradient([[0.5]]).round(2)
        array([[3.]])
        """
        _check_inference_params(noise=noise)
        if not isinstance(return_std, bool | np.bool_):
            raise TypeError(f"return_std must be a bool; got {return_std!r}")
        X = self._validate_queries(X)
        keys = self._training_inputs()
        # The kernel's scale of every input column: the bandwidths, or with discrete
        # features the scales of the encoded columns.
        scales = self.kernel_.input_scale

        def gradient_weights(queries):
            weights = self.kernel_.weights(queries, 0).astype(np.float64)
            if not self.degree_:
                return nadaraya_watson_gradient_weights(
                    weights, queries, keys, scales, self.kernel
                )
            polynomials = self.kernel_.local[0]
            dims = polynomials.dims
            # The slopes in the polynomial's columns; the other (discrete) columns have no
            # derivative, and feature_gradient reports NaN for their features.
            slope = np.zeros(weights.shape + (keys.shape[1],))
            slope[:, :, dims] = polynomials.slopes(weights, self.kernel_, queries, 0)[0]
            slope[:, :, dims] /= scales[dims]
            return slope

        gradient, variance = self._inference().gradient(
            X, gradient_weights, noise if return_std else None
        )
        if self._encoding is not None:
            gradient, variance = self._encoding.feature_gradient(gradient, variance)
        trailing = (gradient.shape[1],)
        if not return_std:
            return self._target_units(gradient, trailing)
        return self._target_units(gradient, trailing), self._target_units(
            np.sqrt(variance), trailing
        )

    # ------------------------------------------------------------- mixed data

    def _mixed_encoding(self, X):
        """The encoding of the discrete features of the training inputs, or ``None``."""
        kinds = resolve_feature_kinds(
            self.categorical_features,
            self.ordinal_features,
            X.shape[1],
            self._categories,
        )
        if not np.any(kinds != "continuous"):
            return None
        if self.kernel != "gaussian":
            raise ValueError(
                "categorical_features and ordinal_features need kernel='gaussian' (the "
                "product with the discrete kernels is a Gaussian of encoded inputs); got "
                f"kernel={self.kernel!r}"
            )
        return MixedEncoding(kinds, X)

    def _fit_mixed_kernel(self, X, Y, sample_weight, candidates):
        """The Gaussian kernel of the encoded inputs (see :mod:`kernattn.bandwidth._mixed`) and the
        degree of the local polynomial in the continuous features."""
        encoding = self._encoding
        Z = encoding.transform(X)
        degree = candidates[0]
        if isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA:
            selections = [
                select_mixed_bandwidth(
                    encoding,
                    X,
                    Z,
                    Y,
                    sample_weight,
                    criterion=self.bandwidth,
                    degree=p,
                    n_jobs=self.n_jobs,
                )
                for p in candidates
            ]
            best = _first_lowest([selection.value for selection in selections])
            selection, degree = selections[best], candidates[best]
            self.bandwidth_ = selection.bandwidth
            if self.bandwidth == "loo":
                self.loo_error_ = selection.value
            else:
                self.criterion_ = selection.value
            self.effective_dof_ = selection.effective_dof
            self.irrelevant_features_ = selection.upper_edge
            # λ = 0 (no smoothing across levels) is an answer; a continuous bandwidth on
            # the lower edge is not.
            self._warn_lower_edge(selection.lower_edge & ~encoding.discrete)
        else:
            self.bandwidth_ = mixed_bandwidth(self.bandwidth, encoding, X, sample_weight)
            if len(candidates) > 1:
                scales = encoding.column_scales(self.bandwidth_)
                objectives = [
                    Criterion(
                        Z,
                        Y,
                        sample_weight,
                        "gaussian",
                        degree=p,
                        n_jobs=self.n_jobs,
                        leave_out_duplicates=bool(np.any(~encoding.discrete)),
                        line=encoding.line_columns(),
                    )
                    for p in candidates
                ]
                degree = _lowest_leave_one_out(objectives, np.log(scales), candidates)
        kernel = self._bandwidth_heads(
            "gaussian", Z, sample_weight, encoding.column_scales(self.bandwidth_), Y.shape[1]
        )
        return kernel, degree

    def _bandwidth_heads(self, similarity, keys, sample_weight, bandwidth, n_outputs):
        """The smoother's kernel: one head comparing (x − c)/h with the keys' (x_i − c)/h."""
        return SoftmaxHeads(
            similarity=similarity,
            center=weighted_mean(keys, sample_weight),
            input_scale=bandwidth,
            query_weights=None,
            key_weights=None,
            scale=np.ones(1),
            head_weights=np.ones(1),
            head_bias=np.zeros(n_outputs),
            keys=keys,
            log_sample_weight=self._log_sample_weight,
            dtype=self._dtype,
        )

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


#: The leave-one-out comparison of degrees at a given bandwidth runs on at most this many
#: training rows (evenly spread in the order of their inputs), each against every key.
_COMPARISON_ROWS = 2400


def _times_square(value, unit):
    """A squared error found in units of ``unit``, in the targets' units: ``inf`` where
    it is beyond the float range (targets near 2¹⁰⁰⁰ have squares near 2²⁰⁰⁰)."""
    with np.errstate(over="ignore"):
        return float(np.float64(value) * np.float64(unit) * np.float64(unit))


def _first_lowest(values):
    """The index of the lowest of ``values``; the first of equal ones (the lower degree)."""
    return int(np.argmin(np.asarray(values, dtype=float)))


def _lowest_leave_one_out(objectives, log_bandwidth, candidates):
    """The degree of ``candidates`` whose leave-one-out error at ``log_bandwidth`` is the
    lowest (one criterion object per degree), on at most ``_COMPARISON_ROWS`` rows."""
    n = objectives[0].n
    rows = None
    if n > _COMPARISON_ROWS:
        rows = np.unique(np.linspace(0, n - 1, _COMPARISON_ROWS).round().astype(int))
    losses = [objective.scaled_loss(log_bandwidth, rows) for objective in objectives]
    return candidates[_first_lowest(losses)]


def _paired_random_state(random_state, n_searches):
    """One random state for several bandwidth searches, so that each draws the same subsets
    of queries and their criteria compare on the same rows: an int as given, otherwise one
    seed drawn from it."""
    if n_searches == 1 or isinstance(random_state, Integral):
        return random_state
    return int(check_random_state(random_state).randint(2**31 - 1))


def _check_inference_params(*, alpha=0.05, method="analytic", noise="local", n_bootstrap=1):
    """Clear errors for the options of the inference methods."""
    if not isinstance(n_bootstrap, Integral) or isinstance(n_bootstrap, bool):
        raise TypeError(f"n_bootstrap must be a positive int; got {n_bootstrap!r}")
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive int; got {n_bootstrap!r}")
    if not isinstance(alpha, Real) or isinstance(alpha, bool) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be a float in (0, 1); got {alpha!r}")
    if not (isinstance(method, str) and method in INTERVAL_METHODS):
        raise ValueError(
            f"method must be one of {', '.join(map(repr, INTERVAL_METHODS))}; got {method!r}"
        )
    if not (isinstance(noise, str) and noise in NOISE_ESTIMATES):
        raise ValueError(
            f"noise must be one of {', '.join(map(repr, NOISE_ESTIMATES))}; got {noise!r}"
        )
