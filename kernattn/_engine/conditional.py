"""The conditional distribution of a fitted Nadaraya–Watson engine: its public methods.

``predict_cdf``, ``predict_quantiles``, ``conformal_interval`` and ``calibrate`` (the held-out
rows of split conformal intervals) of every kernattn regressor. They validate their arguments
and read the fitted state; the mathematics (the tiles of sorted targets, the mixed weights,
the leave-one-out residuals, the held-out residuals' quantile and the intervals) lives in
:mod:`kernattn._engine.distribution`, the K-fold refits of CV+ intervals in
:mod:`kernattn._engine.cross_conformal`.
"""

import warnings

import numpy as np
from sklearn.utils.validation import (
    _check_sample_weight,
    check_array,
    check_consistent_length,
    check_is_fitted,
)

from kernattn._core.namespaces import from_caller, in_caller_library
from kernattn._core.rows import concatenate_parts, out_of_core_rows
from kernattn._engine.cross_conformal import CV_PLUS_FOLDS, FoldModels, check_n_folds, cv_plus
from kernattn._engine.distribution import (
    MixedWeights,
    SplitCalibration,
    cdf_at_counts,
    check_alpha,
    check_confidence,
    check_conformal_method,
    check_quantiles,
    check_thresholds,
    check_y_bandwidth,
    conformal_bounds,
    cross_validated_y_bandwidth,
    leave_one_out_residuals,
    map_distribution,
    quantile_ranks,
    residual_ranks,
    smoothed_cdf,
    smoothed_quantiles,
    threshold_ranks,
)

#: The training rows (at most) whose leave-one-out CDF chooses ``y_bandwidth="cv"``.
Y_BANDWIDTH_ROWS = 400


class ConditionalDistributionMixin:
    """The conditional distribution's methods of :class:`NadarayaWatsonRegressor
    <kernattn._engine.regressor.NadarayaWatsonRegressor>`: the CDF, quantiles and
    conformal intervals from the weights of its predictions.

    The hooks an estimator may override: :meth:`_training_inputs` (the kept inputs as the
    kernel compares them) and :meth:`_exact_kernel` (``None`` for approximate weights).
    """

    def _check_targets_kept(self, conformal=False):
        """The distribution's methods read the kept training targets (and weights against
        them): a fit that keeps none (``partial_fit``, ``fit_chunks``) cannot serve them;
        ``conformal``: the message says what conformal intervals miss."""
        check_is_fitted(self)
        if "_target_order" in self.__dict__ and "X_fit_" in self.__dict__:
            return
        if conformal:
            raise RuntimeError(
                "conformal_interval needs every training row's leave-one-out residual (the "
                "row's own input, target and weight taken out of the sums) and, at each "
                "query, every row's weight; this fit keeps only the key sums S, S2 and z "
                "(partial_fit, or fit_chunks), from which no row can be taken out: call "
                "calibrate(X_held_out, y_held_out) with rows the fit never saw, then "
                "conformal_interval(X, method='split'), or fit on the whole training set in "
                "one call for jackknife+ and CV+"
            )
        raise RuntimeError(
            "the conditional distribution needs the training targets and the weights "
            "against them, and this fit keeps only sums (partial_fit, or a fit in "
            "chunks); fit on the whole training set to use predict_cdf, "
            "predict_quantiles and conformal_interval"
        )

    def _training_inputs(self):
        """The positive-weight training inputs as the kernel sees them (an estimator that
        encodes its inputs overrides this)."""
        return self.X_fit_[self._active]

    def _exact_kernel(self):
        """The kernel whose reduction serves the distribution: its ``sums`` take an order
        of keys (the CDF and quantiles) and left-out pairs (the leave-one-out residuals).
        ``None`` where the weights are approximate: they are then held in memory, and a
        row's own weight is removed from its weights."""
        return self.kernel_

    def _kernel_chosen_with_targets(self):
        """Whether the fit chose its kernel with the training targets (a bandwidth searched
        on a criterion of fit, a learned kernel): then ``conformal_interval``'s
        ``method="auto"`` refits it on folds (CV+). True unless an estimator whose kernel
        can be fixed overrides it."""
        return True

    def _mixed_weights(self):
        """The weights the distribution is taken under (:class:`~kernattn._engine.
        distribution.MixedWeights`)."""
        return MixedWeights(self.kernel_, self._exact_kernel(), self._head_weights)

    def _distribution_queries(self, X):
        """The validated queries of ``predict_cdf`` or ``predict_quantiles`` and the number
        of outputs, once the fit is known to keep its targets."""
        X = self._validate_queries(X)
        self._check_targets_kept()
        return X, self._sorted_targets.shape[1]

    def _report_rearranged(self, n_rearranged, n_queries):
        if n_rearranged:
            warnings.warn(
                f"{n_rearranged} of {n_queries} queries have signed weights whose conditional "
                "CDF decreases or leaves [0, 1]; it was replaced by its monotone "
                "rearrangement (Chernozhukov, Fernández-Val and Galichon 2010) and clipped "
                "to [0, 1]",
                UserWarning,
                stacklevel=4,
            )

    def _per_output(self, result):
        """Drop the leading output axis for a 1-D target."""
        return result[0] if self._target_shape == () else result

    @in_caller_library
    def predict_cdf(self, X, thresholds, *, y_bandwidth=None):
        r"""The conditional CDF :math:`\hat F(t \mid x) = \sum_i w_i(x)\, 1\{y_i \le t\}`.

        The Nadaraya–Watson estimate of the indicator targets :math:`1\{y_i \le t\}` with the
        weights of :meth:`attention_weights` (Hall, Wolff and Yao 1999 [1]_). With the targets
        sorted once at fit and cut into tiles of consecutive ranks, one pass of the kernel
        sums over the keys in that order gives each query's weight on every tile, and a
        threshold then needs the weights of its own tile only: about the cost of one
        ``predict``, whatever the number of thresholds. Non-decreasing in :math:`t`, in
        :math:`[0, 1]`. Where the weights can be negative (local lines, signed feature
        maps) a query whose sums decrease or leave :math:`[0, 1]` gets their monotone
        rearrangement (Chernozhukov, Fernández-Val and Galichon 2010 [2]_), clipped; a
        ``UserWarning`` says how many. With several heads, the mixture of their weights
        in the shares :math:`|a_h| / \sum_g |a_g|` (as ``return_std``).

        With ``y_bandwidth`` the CDF is smoothed in :math:`y` as well (R np's ``npcdist``;
        Li, Lin and Racine [3]_):
        :math:`\tilde F(t \mid x) = \sum_i w_i(x)\, \Phi((t - y_i)/h_y)`, one kernel sum
        of the columns :math:`\Phi((t_k - y_i)/h_y)` (its cost grows with the number of
        thresholds). ``"cv"`` chooses :math:`h_y` per output by leave-one-out: at most 400
        training rows, evenly spread, each with its own row and exact duplicates removed
        from its weights, minimize the integrated squared distance between their CDF and
        their own target's step, :math:`\int (\tilde F_{-i}(t \mid x_i) - 1\{y_i \le
        t\})^2 dt` (the CRPS, over 50 quantiles of the targets) among :math:`2^{-5}` to
        :math:`2^2` times Silverman's rule for the targets; the choice is kept for later
        calls on this fit.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        thresholds : array_like of shape (n_thresholds,) or (n_outputs, n_thresholds)
            Sorted increasingly, no NaN; one row per output, or one list for all.
        y_bandwidth : None, "cv", float or array_like of shape (n_outputs,), default=None
            ``None``: the step CDF of the training targets; otherwise the bandwidth of the
            Gaussian kernel CDF in :math:`y`, in the targets' units.

        Returns
        -------
        cdf : ndarray of shape (n_queries, n_thresholds)
            With a leading ``n_outputs`` axis for 2-D targets.

        References
        ----------
        .. [1] P. Hall, R. C. L. Wolff, Q. Yao, "Methods for estimating a conditional
           distribution function", J. Amer. Statist. Assoc. 94 (1999).
        .. [2] V. Chernozhukov, I. Fernández-Val, A. Galichon, "Quantile and probability
           curves without crossing", Econometrica 78 (2010).
        .. [3] Q. Li, J. Lin, J. S. Racine, "Optimal bandwidth selection for nonparametric
           conditional distribution and quantile functions", J. Bus. Econ. Statist. 31
           (2013).

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> X = np.linspace(0, 1, 200)[:, None]
        >>> y = X[:, 0] + 0.1 * np.random.default_rng(0).normal(size=200)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> model.predict_cdf([[0.5]], [0.3, 0.5, 0.7]).round(2)
        array([[0.01, 0.59, 0.98]])
        >>> model.predict_cdf([[0.5]], [0.3, 0.5, 0.7], y_bandwidth=0.05).round(2)
        array([[0.04, 0.51, 0.97]])
        """
        X, n_outputs = self._distribution_queries(X)
        thresholds = check_thresholds(thresholds, n_outputs)
        y_bandwidth = check_y_bandwidth(y_bandwidth, n_outputs)
        weights = self._mixed_weights()
        if y_bandwidth is not None:
            if isinstance(y_bandwidth, str):
                y_bandwidth = self._cross_validated_y_bandwidth(weights)
            targets = self._values + self._y_offset
            out, n_rearranged = smoothed_cdf(
                weights, X, targets, thresholds, y_bandwidth, self.n_jobs
            )
            self._report_rearranged(n_rearranged, len(X))
            return self._per_output(out)
        ranks = [
            threshold_ranks(self._sorted_targets[:, o], thresholds[o]) for o in range(n_outputs)
        ]
        out = np.zeros((n_outputs, len(X), thresholds.shape[1]))

        def compute(rows, o, masses, fractions, tile):
            out[o, rows] = cdf_at_counts(masses, ranks[o], fractions, tile)

        n_rearranged = map_distribution(weights, X, self._target_order, compute, self.n_jobs)
        self._report_rearranged(n_rearranged, len(X))
        return self._per_output(out)

    def _cross_validated_y_bandwidth(self, weights=None):
        """Per output, the bandwidth in y of the smoothed CDF with the lowest leave-one-out
        CRPS (see :meth:`predict_cdf`), computed once per fit (``weights``:
        :meth:`_mixed_weights`, default made here)."""
        weights = self._mixed_weights() if weights is None else weights

        def compute():
            targets = self._values + self._y_offset
            inputs = self._training_inputs()
            return cross_validated_y_bandwidth(weights, inputs, targets, Y_BANDWIDTH_ROWS)

        return self.__dict__["_y_bandwidth_built"].get(compute)

    @in_caller_library
    def predict_quantiles(self, X, quantiles=(0.1, 0.5, 0.9), *, y_bandwidth=None):
        r"""Conditional quantiles :math:`\hat Q(\tau \mid x) = \inf\{t : \hat F(t \mid x)
        \ge \tau\}` of :meth:`predict_cdf`.

        Exact weighted quantiles of the training targets under each query's weights (Hall,
        Wolff and Yao 1999; R np's ``npqreg``): the smallest target whose cumulative
        weight, over the targets sorted once at fit, reaches :math:`\tau` (for
        :math:`\tau = 0` the smallest target of positive weight). Non-crossing by
        construction: every level reads the same non-decreasing :math:`\hat F`. Every query
        of a block is served at once (no loop over queries): one pass of the kernel sums
        over the keys in target order gives each query's weight on every tile of sorted
        targets, and the tile where a level is reached is then read key by key (about
        twice the cost of one ``predict`` for 9 levels). Signed weights (local lines,
        signed feature maps) are rearranged first, as in :meth:`predict_cdf`.

        With ``y_bandwidth`` (as in :meth:`predict_cdf`: a bandwidth in :math:`y` per
        output, or ``"cv"``, the choice kept for later calls on this fit), the quantiles of
        the CDF smoothed in :math:`y`,
        :math:`\tilde F(t \mid x) = \sum_i w_i(x)\, \Phi((t - y_i)/h_y)` (R np's
        ``npqreg``): the threshold where it reaches :math:`\tau`, found for every query and
        level at once, first on a grid of 64 thresholds from the smallest target less
        :math:`9 h_y` to the largest plus :math:`9 h_y`, then by Newton's steps inside the
        grid's cell (bisection where a step leaves it) until :math:`\tilde F` is within
        1e-13 of :math:`\tau` (a step from within 1e-8 of it is the last). The weights of
        each block of queries are then held in memory, and each step costs one pass over
        the targets within :math:`9 h_y` of the cell (those further below count their whole
        weight): three or four passes per query and level. Level 0 gives
        :math:`-\infty` and level 1 :math:`+\infty` (the Gaussian kernel CDF reaches
        neither); as :math:`h_y \to 0` the quantiles tend to the exact ones. Signed weights
        take the monotone rearrangement of their smoothed CDF on the grid, clipped, inverted
        linearly inside the cell.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        quantiles : float or array_like of floats in [0, 1], default=(0.1, 0.5, 0.9)
        y_bandwidth : None, "cv", float or array_like of shape (n_outputs,), default=None
            ``None``: exact weighted quantiles of the training targets; otherwise the
            bandwidth of the Gaussian kernel CDF in :math:`y`, in the targets' units.

        Returns
        -------
        quantiles : ndarray of shape (n_queries, n_quantiles)
            Non-decreasing along the levels when they are sorted; with a leading
            ``n_outputs`` axis for 2-D targets.

        See Also
        --------
        conformal_interval : prediction intervals with a coverage guarantee.

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> X = np.linspace(0, 1, 400)[:, None]
        >>> noise = (0.05 + 0.2 * X[:, 0]) * np.random.default_rng(1).normal(size=400)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, X[:, 0] + noise)
        >>> model.predict_quantiles([[0.2], [0.8]], [0.1, 0.5, 0.9]).round(2)
        array([[0.06, 0.19, 0.3 ],
               [0.56, 0.76, 1.07]])
        >>> model.predict_quantiles([[0.2], [0.8]], [0.1, 0.5, 0.9], y_bandwidth=0.05).round(2)
        array([[0.05, 0.2 , 0.33],
               [0.55, 0.76, 1.06]])
        """
        X, n_outputs = self._distribution_queries(X)
        levels = check_quantiles(quantiles)
        y_bandwidth = check_y_bandwidth(y_bandwidth, n_outputs)
        if y_bandwidth is not None:
            out, n_rearranged = self._smoothed_quantiles(X, levels, y_bandwidth)
            self._report_rearranged(n_rearranged, len(X))
            return self._per_output(out.astype(self._dtype, copy=False))
        out = np.zeros((n_outputs, len(X), len(levels)))

        def compute(rows, o, masses, fractions, tile):
            ranks = quantile_ranks(masses, levels, fractions, tile)
            out[o, rows] = self._sorted_targets[ranks, o]

        weights = self._mixed_weights()
        n_rearranged = map_distribution(weights, X, self._target_order, compute, self.n_jobs)
        self._report_rearranged(n_rearranged, len(X))
        return self._per_output(out.astype(self._dtype, copy=False))

    def _smoothed_quantiles(self, X, levels, y_bandwidth):
        """The quantiles of the CDF smoothed in y with ``y_bandwidth`` (checked), (n_outputs,
        n_queries, n_levels), and the number of signed rows rearranged."""
        weights = self._mixed_weights()
        if isinstance(y_bandwidth, str):
            y_bandwidth = self._cross_validated_y_bandwidth(weights)
        targets = self._values + self._y_offset
        return smoothed_quantiles(weights, X, targets, levels, y_bandwidth, self.n_jobs)

    @in_caller_library
    def conformal_interval(
        self, X, alpha=0.1, method="auto", *, n_folds=CV_PLUS_FOLDS, confidence=None
    ):
        r"""Prediction intervals for a new observation: jackknife+, CV+, split or local.

        Meant to contain the next *observation* (not the mean, as ``predict_interval``)
        with probability :math:`1 - \alpha`. ``"jackknife+"`` and ``"local"`` refit
        nothing: the leave-one-out estimate :math:`\hat\mu_{-i}` is the kernel average with
        row :math:`i` (and its exact duplicates) left out of the sums, :math:`R_i = |y_i -
        \hat\mu_{-i}(x_i)|`, the kernel held as fitted on all rows. Where it was chosen by
        minimizing these very residuals (``bandwidth="loo"``, a learned kernel) they are
        optimistically small (jackknife+ covered 0.82 at :math:`\alpha = 0.1` on 200 rows
        with 5 inputs): ``"cv+"`` redoes the selection, ``"split"`` needs held-out rows.

        - ``"jackknife+"`` (Barber, Candès, Ramdas and Tibshirani 2021 [1]_):
          :math:`[\hat q^-_\alpha\{\hat\mu_{-i}(x) - R_i\},\
          \hat q^+_\alpha\{\hat\mu_{-i}(x) + R_i\}]`, :math:`\hat q^+_\alpha` the
          :math:`\lceil(1-\alpha)(n+1)\rceil`-th smallest of the :math:`n` values,
          :math:`\hat q^-_\alpha` the :math:`\lfloor\alpha(n+1)\rfloor`-th smallest. For a
          fixed kernel (a float bandwidth, a rule that reads the inputs only) its coverage
          is at least :math:`1 - 2\alpha` for exchangeable data, about :math:`1 - \alpha` in
          practice; a kernel chosen with the targets is not accounted for.
        - ``"cv+"`` (the same paper, section 3; MAPIE's ``method="plus"``): the kept rows
          dealt into ``n_folds`` folds (a fixed random permutation), fold :math:`k`'s model
          :math:`\hat\mu_{-k}` the estimator ``clone``-refitted on the others (``random_state``
          included; bandwidth search or training redone), and jackknife+'s rule with
          :math:`\hat\mu_{-k(i)}` (its full prediction) for :math:`\hat\mu_{-i}` and the
          held-out :math:`R_i`. Coverage at least about :math:`1 - 2\alpha` whatever the
          procedure, selection included, :math:`1 - \alpha` or a little more in practice.
        - ``"split"`` (split conformal, Lei et al. 2018 [3]_; MAPIE's ``cv="prefit"``):
          :math:`\hat\mu(x) \pm \hat q`, :math:`\hat q` the
          :math:`\lceil(1-\alpha)(n+1)\rceil`-th smallest of the absolute residuals of the
          :math:`n` held-out rows given to :meth:`calibrate`. Coverage at least
          :math:`1 - \alpha` in finite samples for calibration rows and new observations
          exchangeable with each other, whatever the fit: the one method for fits that keep
          no rows (``partial_fit``, ``fit_chunks``); centered on ``predict``.
        - ``"auto"`` (default): ``"split"`` whenever this fit has a calibration (the rows
          were held out for it); else ``"cv+"`` where the kernel was chosen with the targets
          (a ``KernelSmoother`` bandwidth ``"loo"``, ``"aic"``, ``"gcv"``, ``"plugin"`` or
          degree ``"auto"``; an ``AttentionRegressor``; a ``LinearAttentionRegressor`` with
          ``bandwidth="loo"``, a learned projection or attention kernel), else jackknife+.
        - ``"local"``: :math:`\hat\mu(x) \pm \hat q(x)`, :math:`\hat q(x)` the
          :math:`(1-\alpha)(1 + 1/n_\mathrm{eff})` quantile of the :math:`R_i` weighted by
          the query's kernel weights :math:`w_i(x)` (:math:`n_\mathrm{eff} = 1 / \sum_i
          w_i(x)^2`): wider where the noise is larger. Its coverage holds approximately,
          conditionally on the neighbourhood of :math:`x` (Guan 2023 [2]_).

        ``"jackknife+"`` and ``"local"`` use each head's local constant, not its line or
        tilt. Sample weights weigh the kernel and, for jackknife+ and CV+, the ranks.

        The coverage :math:`1 - \alpha` is an average over training sets: on one training
        set the interval covers a fraction of new observations that varies about it, by
        about :math:`\sqrt{\alpha(1-\alpha)/n}` (0.016 at :math:`n = 350`, :math:`\alpha =
        0.1`). ``confidence`` :math:`= 1 - \delta` asks for more: coverage at least
        :math:`1 - \alpha` *given these rows*, for all but a share :math:`\delta` of
        training sets ("training-conditional" or PAC validity, Vovk 2012 [4]_). The rank
        :math:`\lceil(1-\alpha)(n+1)\rceil` becomes the smallest :math:`k` with
        :math:`P\{\mathrm{Bin}(n, 1-\alpha) \ge k\} \le \delta`: about :math:`z_{1-\delta}
        \sqrt{n\alpha(1-\alpha)}` more rows, a slightly wider interval. The guarantee is
        exact for ``"split"``; for ``"jackknife+"`` and ``"cv+"`` it holds approximately for
        a stable estimator such as a kernel average (Liang and Barber 2023 [5]_), not in
        general. ``"local"`` has no such rank and refuses it.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        alpha : float in (0, 1), default=0.1
            One minus the nominal coverage (0.1: 90 % intervals).
        method : {"auto", "jackknife+", "cv+", "split", "local"}, default="auto"
            ``"auto"``: ``"split"`` after :meth:`calibrate`, else ``"cv+"`` where the kernel
            was chosen with the targets, else ``"jackknife+"``.
        n_folds : int, default=20
            The folds :math:`K` of ``"cv+"`` (at most one per kept row); unused otherwise.
            Its first call costs ``n_folds`` fits (trainings, for a learned kernel).
        confidence : float in (0, 1) or None, default=None
            ``None``: coverage :math:`1 - \alpha` on average over training sets. A float
            :math:`1 - \delta` (0.9, say): coverage at least :math:`1 - \alpha` given
            these training (or calibration) rows, with probability :math:`1 - \delta`
            (see above); not for ``"local"``.

        Returns
        -------
        lower, upper : ndarray of shape (n_queries,) or (n_queries, n_outputs)
            Shaped like ``predict``'s output; :math:`\pm\infty` where too few residuals
            (or too few effective neighbours, for ``"local"``) support the level.

        Notes
        -----
        The leave-one-out residuals take one pass of the training set against itself,
        :math:`O(n^2 d)`, on the first call after a fit (then kept); each query then costs
        :math:`O(n)`. ``"cv+"`` refits the estimator :math:`K` times on its first call
        (then kept); each query costs :math:`K` ``predict`` calls, and one for ``"split"``.
        Only ``"split"`` serves an ``AttentionRegressor`` fitted with ``leave_one_out=False``
        and a ``LinearAttentionRegressor`` fitted in parts (``partial_fit``, ``fit_chunks``;
        the others raise). On dask partitions jackknife+ and ``"local"`` are computed where
        the rows are, near field included, and CV+ raises.

        References
        ----------
        .. [1] R. F. Barber, E. J. Candès, A. Ramdas, R. J. Tibshirani, "Predictive
           inference with the jackknife+", Ann. Statist. 49 (2021).
        .. [2] L. Guan, "Localized conformal prediction: a generalized inference framework
           for conformal prediction", Biometrika 110 (2023).
        .. [3] J. Lei, M. G'Sell, A. Rinaldo, R. J. Tibshirani, L. Wasserman,
           "Distribution-free predictive inference for regression", J. Amer. Statist.
           Assoc. 113 (2018).
        .. [4] V. Vovk, "Conditional validity of inductive conformal predictors",
           Proc. Asian Conference on Machine Learning, PMLR 25 (2012).
        .. [5] R. Liang, R. F. Barber, "Algorithmic stability implies training-conditional
           coverage for distribution-free prediction methods", arXiv:2311.04295 (2023).

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(0, 1, size=(300, 1))
        >>> y = X[:, 0] + 0.1 * rng.normal(size=300)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> lower, upper = model.conformal_interval([[0.5]], alpha=0.1)
        >>> (upper - lower).round(1)  # about 2 × 1.645 noise standard deviations
        array([0.3])
        """
        alpha = check_alpha(alpha)
        method = check_conformal_method(method)
        n_folds = check_n_folds(n_folds)
        confidence = check_confidence(confidence)
        if confidence is not None and method == "local":
            raise ValueError(
                "confidence (coverage given the training rows) needs a rank among the "
                "residuals, which method='local' does not take: use 'jackknife+', 'cv+' "
                "or 'split', or confidence=None"
            )
        queries = self._validate_queries(X)
        method = self._resolve_conformal_method(method)
        if method == "split":
            lower, upper = self._split_bounds(queries, alpha, confidence)
        elif method == "cv+":
            # The fold models validate (and encode) the queries as given.
            weight = self._kept_sample_weight()
            lower, upper = cv_plus(
                self._fold_models(n_folds), X, alpha, weight, self.n_jobs, confidence
            )
        else:
            weights, ranked, sample_weight, values = self._conformal_source(queries)
            lower, upper = conformal_bounds(
                weights,
                queries,
                method,
                alpha,
                ranked,
                sample_weight,
                values,
                self.n_jobs,
                confidence,
            )
            lower, upper = lower + self._y_offset, upper + self._y_offset
        shape = (len(queries),) + self._target_shape
        return lower.reshape(shape).astype(self._dtype), upper.reshape(shape).astype(self._dtype)

    def _resolve_conformal_method(self, method):
        """``method`` (checked) with ``"auto"`` resolved, once the fit is known to serve it:
        ``"split"`` needs a calibration, the others a fit on the leave-one-out loss."""
        calibrated = "_calibration" in self.__dict__
        if method == "split" or (method == "auto" and calibrated):
            if not calibrated:
                raise RuntimeError(
                    "conformal_interval with method='split' reads the residuals of held-out "
                    "rows, and this fit has none: call calibrate(X_held_out, y_held_out) with "
                    "rows the fit never saw (again after every fit or partial_fit, which drop "
                    "the calibration), then conformal_interval"
                )
            return "split"
        if getattr(self, "leave_one_out", True) is False:
            raise ValueError(
                "conformal intervals need leave-one-out residuals of a kernel fitted on the "
                "leave-one-out loss; this model was fitted with leave_one_out=False (its "
                "kernel copies each row's own target); refit with leave_one_out=True, or call "
                "calibrate(X_held_out, y_held_out) and use method='split'"
            )
        if method == "auto":
            return "cv+" if self._kernel_chosen_with_targets() else "jackknife+"
        return method

    def _split_bounds(self, queries, alpha, confidence=None):
        """The split conformal intervals of validated ``queries``, (n_queries, n_outputs)
        each: ``predict`` ± the calibration's half-width."""
        half = self._calibration.half_width(alpha, confidence)
        prediction = np.asarray(self.predict(queries), dtype=np.float64)
        prediction = prediction.reshape(len(queries), -1)
        return prediction - half, prediction + half

    def calibrate(self, X, y, sample_weight=None):
        r"""Keep the absolute residuals of held-out rows for split conformal intervals.

        Split (inductive) conformal prediction (Papadopoulos et al. 2002 [1]_; Lei et al.
        2018 [2]_; MAPIE's ``cv="prefit"``): the fitted model predicts ``n`` calibration
        rows it never saw, and their residuals :math:`R_i = |y_i - \hat\mu(x_i)|` (per
        output) are kept; ``conformal_interval(X, alpha, method="split")`` (or ``"auto"``)
        is then :math:`\hat\mu(x) \pm \hat q`, :math:`\hat q` the
        :math:`\lceil(1-\alpha)(n+1)\rceil`-th smallest :math:`R_i` (:math:`\pm\infty` when
        that exceeds :math:`n`: at least :math:`1/\alpha - 1` rows are needed). If the
        calibration rows and the new observation are exchangeable (drawn from the same
        distribution, independently of the fit), the interval contains the observation with
        probability at least :math:`1 - \alpha`, exactly in finite samples, whatever the
        model and however it was fitted: after ``partial_fit`` or
        :func:`~kernattn.fit_chunks`, which keep no rows for jackknife+ or CV+, or on the
        partitions of a dask collection, whose jackknife+ passes every partition against
        every other. With sample weights :math:`s_i`, :math:`\hat q` is the smallest
        residual :math:`v` with :math:`\sum_{R_i \le v} s_i \ge (1-\alpha)(\sum_i s_i + \bar s)`,
        the weighted conformal quantile of Tibshirani et al. (2019) [3]_ with the new
        observation weighing the mean weight :math:`\bar s` (exact for equal weights).

        The calibration belongs to this fit: ``fit``, ``partial_fit`` and ``fit_chunks``
        drop it (the model changed), and a call replaces the last one. Rows the fit saw
        make the residuals too small and the intervals too narrow.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            The held-out inputs. A dask array or dataframe (with ``y`` a dask collection
            of the same rows): predicted on the workers, only the predictions, targets and
            weights (``n`` values each) are brought back.
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
            Their targets, shaped as at fit.
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative, at least one positive; rows of weight 0 are left out.

        Returns
        -------
        self : estimator
            With its calibration; the last one is kept if this call raises.

        References
        ----------
        .. [1] H. Papadopoulos, K. Proedrou, V. Vovk, A. Gammerman, "Inductive confidence
           machines for regression", ECML (2002).
        .. [2] J. Lei, M. G'Sell, A. Rinaldo, R. J. Tibshirani, L. Wasserman,
           "Distribution-free predictive inference for regression", J. Amer. Statist.
           Assoc. 113 (2018).
        .. [3] R. J. Tibshirani, R. F. Barber, E. J. Candès, A. Ramdas, "Conformal
           prediction under covariate shift", NeurIPS (2019).

        Examples
        --------
        A model streamed with ``partial_fit``, 20 % of the rows held out to calibrate it:

        >>> import numpy as np
        >>> from kernattn import LinearAttentionRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(-2, 2, size=(2500, 1))
        >>> y = np.sin(X[:, 0]) + 0.2 * rng.normal(size=2500)
        >>> model = LinearAttentionRegressor(n_near_keys=0, bandwidth=0.3, random_state=0)
        >>> for start in range(0, 2000, 500):
        ...     model = model.partial_fit(X[start : start + 500], y[start : start + 500])
        >>> model = model.calibrate(X[2000:], y[2000:])
        >>> lower, upper = model.conformal_interval([[0.0], [1.0]], alpha=0.1)
        >>> (upper - lower).round(2)  # about 2 × 1.645 noise standard deviations
        array([0.65, 0.65])
        """
        check_is_fitted(self)
        rows = out_of_core_rows(X, y, sample_weight)
        if rows is None:
            (X, y, sample_weight), _ = from_caller(X, y, sample_weight)
            check_consistent_length(X, y)
        else:
            # Only the targets and weights come back: the inputs stay where they are.
            y, sample_weight = rows.reduce(targets_and_weights, concatenate_parts)
        Y, sample_weight = self._calibration_targets(y, sample_weight)
        prediction = np.asarray(self.predict(X), dtype=np.float64).reshape(len(Y), -1)
        kept = sample_weight > 0
        residuals = np.abs(Y - prediction)[kept]
        weight = sample_weight[kept]
        equal = np.all(weight == weight[0])
        self._calibration = SplitCalibration(residuals, None if equal else weight)
        return self

    def _calibration_targets(self, y, sample_weight):
        """The calibration targets as (n, n_outputs) floats, checked (finite, shaped as at
        fit), and their weights (non-negative, at least one positive)."""
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        if y.shape[1:] != self._target_shape:
            raise ValueError(
                f"y has shape {y.shape[1:]} per row; the model was fitted on targets of shape "
                f"{self._target_shape} per row, and calibrate takes the same"
            )
        sample_weight = _check_sample_weight(
            sample_weight, y, dtype=np.float64, ensure_non_negative=True
        )
        if not np.any(sample_weight > 0):
            raise ValueError(
                "sample_weight of calibrate must have at least one positive entry; got only zeros"
            )
        return y.reshape(len(y), -1), sample_weight

    def _conformal_source(self, X):
        """What the conformal intervals at queries ``X`` are computed from: the weights
        (:meth:`_mixed_weights`), the kept rows' ranked leave-one-out residuals
        (:meth:`_residuals`), their sample weights and centered values. A fit whose rows
        are elsewhere overrides it."""
        self._check_targets_kept(conformal=True)
        weights = self._mixed_weights()
        return weights, self._residuals(weights), self.sample_weight_[self._active], self._values

    def _residuals(self, weights=None):
        """The kept rows' leave-one-out residuals ranked for conformal intervals
        (:func:`~kernattn._engine.distribution.residual_ranks`), computed once per fit
        (``weights``: :meth:`_mixed_weights`, default made here)."""
        weights = self._mixed_weights() if weights is None else weights

        def compute():
            inputs = self._training_inputs()
            columns = None if weights.exact is None else self._value_columns
            residuals = leave_one_out_residuals(
                weights, inputs, self._values, columns, self._value_scale
            )
            return residual_ranks(residuals, inputs)

        return self.__dict__["_residuals_built"].get(compute)

    def _kept_sample_weight(self):
        """The sample weights of the kept rows, once the fit is known to keep them in
        memory (else a ``RuntimeError`` that says what CV+ needs)."""
        if not isinstance(self.__dict__.get("X_fit_", np.empty(0)), np.ndarray):
            raise RuntimeError(
                "conformal_interval with method='cv+' refits the estimator on folds of the "
                "training rows, and this model was fitted on the partitions of a dask "
                "collection, whose rows stay where they are; fit on the computed arrays, or "
                "pass method='jackknife+' (computed on the partitions, the kernel held "
                "fixed)"
            )
        self._check_targets_kept(conformal=True)
        return self.sample_weight_[self._active]

    def _fold_models(self, n_folds):
        """The estimator refitted on the kept rows with each of ``n_folds`` folds left out
        (:class:`~kernattn._engine.cross_conformal.FoldModels`), built on the first CV+
        call after a fit with that number of folds and kept (:meth:`_kept_sample_weight`
        first checks that the rows are kept)."""
        built = self.__dict__["_fold_models_built"].get(dict)
        if n_folds not in built:
            rows = self._active
            built[n_folds] = FoldModels(
                self, self.X_fit_[rows], self.y_fit_[rows], self.sample_weight_[rows], n_folds
            )
        return built[n_folds]


def targets_and_weights(X, y, w, part):
    """One part's targets and weights (every weight 1 where none were given), for
    :meth:`calibrate <ConditionalDistributionMixin.calibrate>` on rows in parts."""
    y = np.asarray(y)
    return y, np.ones(len(y)) if w is None else np.asarray(w)
