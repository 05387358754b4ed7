r"""``AttentionClassifier``: class probabilities from learned multi-head attention."""

import copy
import warnings
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from scipy.linalg import eigh
from scipy.optimize import minimize_scalar
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from kernattn._core.blocks import single_threaded_blas
from kernattn._core.loo import DuplicateGroups
from kernattn._core.numerics import standardization
from kernattn._engine.heads import head_indices
from kernattn._engine.labels import (
    KernelSource,
    LabelEngine,
    NadarayaWatsonClassifier,
    choose_prior_share,
    loo_queries,
    unseen_weight,
)
from kernattn.learned._fitted import FittedHeadsMixin
from kernattn.learned._local import held_out_estimates
from kernattn.learned._objective import Layout, LeaveOneOutObjective
from kernattn.learned._optimize import (
    initial_projections,
    optimize,
    sample_groups,
    validation_split,
)
from kernattn.learned._start import initial_scale, uniform_start

#: The starts of the projections.
INITS = ("lda", "pca", "identity")
#: The losses the kernel is trained on.
LOSSES = ("log", "brier")
#: The share of the distinct training inputs held out to stop the training and choose the
#: prior's share, from ``MIN_VALIDATION_GROUPS`` distinct inputs (below, leave-one-out).
VALIDATION_FRACTION = 0.2
MIN_VALIDATION_GROUPS = 20
#: Up to this many distinct training inputs every row is held out once: the kernel is
#: trained ``CROSS_FIT_FOLDS`` times, and the width and the prior's share are chosen on all
#: the held-out rows (the first training's kernel is the one kept).
CROSS_FIT_GROUPS = 1000
CROSS_FIT_FOLDS = 5
#: The logarithms of the factors of the logits the held-out log-loss chooses among.
LOG_WIDTH_RANGE = (-3.0, 3.0)
LOG_WIDTH_STEP = 0.25
#: The first pass of that grid takes every COARSE-th point.
COARSE = 4
#: The least share of the within-class covariance's mean eigenvalue in the discriminant
#: start's shrinkage (features constant within every class).
_LDA_RIDGE = 1e-3


class HeldOutFit(NamedTuple):
    """One training of the kernel: its parameters, iterations and loss per iteration, the
    rows held out from it (``None``: none) and the keys those rows attend to (``None``:
    every row, by leave-one-out)."""

    theta: np.ndarray
    n_iter: int
    loss_curve: list
    rows: np.ndarray
    keys: np.ndarray


def ledoit_wolf_share(X, sample_weight):
    r"""The Ledoit–Wolf share :math:`\rho \in [0, 1]` of the shrinkage
    :math:`(1 - \rho) S + \rho \mu I` of the second moments :math:`S` of the centered rows
    ``X`` (:math:`\mu = \operatorname{tr} S / d`), the rows weighted as repeated rows:
    :math:`\rho = \min(\beta, \delta) / \delta` with :math:`\delta = \|S - \mu
    I\|_F^2 / d` and :math:`\beta = (\overline{\|x\|^4} - \|S\|_F^2) / (d\, W)`, the
    bars weighted means and :math:`W` the weights' sum (scikit-learn's
    ``ledoit_wolf_shrinkage`` for unit weights; Ledoit and Wolf 2004)."""
    total = float(sample_weight.sum())
    d = X.shape[1]
    S = (X * sample_weight[:, None]).T @ X / total
    mu = np.trace(S) / d
    delta = np.sum((S - mu * np.eye(d)) ** 2) / d
    if not delta > 0:
        return 0.0
    fourth = sample_weight @ np.sum(X**2, axis=1) ** 2 / total
    beta = (fourth - np.sum(S**2)) / (d * total)
    return float(np.clip(beta / delta, 0.0, 1.0))


def discriminant_directions(Z, Y, sample_weight, head_dim):
    r"""The start ``"lda"``: the directions :math:`v` of Fisher's discriminant,
    :math:`S_b v = \lambda S_w v` (between- and within-class covariances of the
    standardized inputs) with :math:`\lambda > 0`, largest first, then the principal
    directions of the inputs (of their total covariance), each normalized to unit
    within-class spread, :math:`v^\top S_w v = 1`.

    The within-class covariance is shrunk toward its mean eigenvalue by the Ledoit–Wolf
    share (:func:`ledoit_wolf_share`, as scikit-learn's
    ``LinearDiscriminantAnalysis(shrinkage="auto")`` shrinks it; at least ``_LDA_RIDGE``
    of that eigenvalue, for features constant within every class): estimated from a few
    hundred rows in tens of dimensions, its smallest eigenvalues are mostly noise, and the
    plain discriminant aims along them. On ``examples/benchmarks/bench_classify.py``'s ten
    sets (5-fold, six shuffles) the trained classifier's geometric mean of the log-loss
    ratio to the best reference (of one shuffle) fell from 1.24 to 1.20 (wine 0.128 →
    0.101, digits 0.084 → 0.073, breast_cancer 0.113 → 0.108), and rose on iris (0.170 →
    0.196), whose discriminant lies along a direction of small within-class spread, which
    shrinking blurs.

    Beyond the ``n_classes − 1`` discriminant directions the generalized eigenvectors are
    an arbitrary basis of a degenerate eigenspace (their :math:`\lambda` is 0), which
    rounding alone would choose: the principal directions are well defined instead."""
    sw = sample_weight / sample_weight.sum()
    mean = sw @ Z
    counts = sw @ Y
    present = counts > 0
    means = (Y[:, present].T * sw) @ Z / counts[present][:, None]
    within = Z - Y[:, present] @ means
    S_w = (within * sw[:, None]).T @ within
    S_b = ((means - mean) * counts[present][:, None]).T @ (means - mean)
    d = Z.shape[1]
    share = max(ledoit_wolf_share(within, sample_weight), _LDA_RIDGE)
    S_w = (1.0 - share) * S_w + share * max(np.trace(S_w) / d, 1e-12) * np.eye(d)
    eigenvalues, V = eigh(S_b, S_w)
    order = np.argsort(eigenvalues, kind="stable")[::-1]
    separating = order[eigenvalues[order] > 1e-10 * max(eigenvalues.max(), 1e-300)]
    directions = [V[:, j] for j in separating[: min(head_dim, int(present.sum()) - 1)]]
    if len(directions) < head_dim:
        centered = Z - mean
        variances, principal = np.linalg.eigh((centered * sw[:, None]).T @ centered)
        for j in np.argsort(variances, kind="stable")[::-1][: head_dim - len(directions)]:
            v = principal[:, j]
            directions.append(v / np.sqrt(v @ S_w @ v))
    W = np.zeros((d, head_dim))
    W[:, : len(directions)] = np.column_stack(directions)
    return W


class AttentionClassifier(FittedHeadsMixin, NadarayaWatsonClassifier):
    r"""Nadaraya–Watson classification with a learned multi-head attention kernel.

    The class probabilities at a query :math:`x` are the attention weights' class sums,

    .. math::

        \hat p_c(x) = \sum_h a_h \sum_{i: y_i = c} w^h_i(x), \qquad
        w^h_i(x) = \mathrm{softmax}_i\big(s_h\, \mathrm{sim}(u W_q^h, u_i W_k^h)
        + \log s_i\big),

    (:math:`u` the standardized input, heads, similarities and scales as in
    :class:`~kernattn.AttentionRegressor`, a convex mixture :math:`a_h \ge 0`,
    :math:`\sum_h a_h = 1`), smoothed toward the class frequencies by the share
    ``prior_share_`` chosen by leave-one-out log-loss, so no probability is 0. This is
    softmax attention whose values are the one-hot labels of the keys: the mixed weights
    sum to 1, the probabilities are a Nadaraya–Watson estimate (the local constant; no
    local line, whose signed weights could give negative probabilities).

    The projections, the scales (``scale="learned"``) and the mixture minimize the
    leave-one-out loss of the training rows (each row's probabilities from the other
    rows, its exact duplicates left out), by L-BFGS with the analytic gradient of
    :class:`~kernattn.learned._objective.LeaveOneOutObjective`:

    - ``loss="log"``: the log-loss :math:`-\log \hat p_{y_i}(x_i)`, neighbourhood
      components analysis (Goldberger et al. 2004) in its log form, trained with a
      softmax attention head instead of a metric followed by a vote;
    - ``loss="brier"`` (default): the Brier score :math:`\|\hat p(x_i) - e_{y_i}\|^2`, the squared
      error of the one-hot codes (the regressor's own objective). Both are strictly proper
      scores: their expectation under the true class probabilities is smallest at those
      probabilities, so either trains calibrated probabilities (up to the model's reach).
      The Brier score is bounded and forgives a confident mistake more, which makes it the
      more robust training loss of a metric with ``n_features × head_dim`` parameters:
      with 5-fold cross-validation its held-out log-loss was lower than the log-loss's
      own training on iris, breast_cancer and digits (0.22 against 0.37 on
      breast_cancer). The log-loss is what ``prior_share_`` is chosen by.

    From 20 distinct training inputs a fifth of them (whole duplicate groups, drawn with
    ``random_state``) is held out: training keeps the parameters with the lowest loss of
    those queries against the other rows. Up to 1 000 distinct inputs the kernel is
    trained four more times, each holding out another fifth, so that every row is held
    out once (cross-fitting); the width (``width_factor_``) and the prior's share are
    chosen by the log-loss of all the held-out rows, counting one unseen mistake
    (Laplace's rule of succession: held-out rows rarely show the confident mistakes a
    sharp kernel makes). The kept kernel is the first training's, and the fitted
    classifier attends to every row. A single fifth is too few rows to choose by on small
    data: on iris (120 training rows) its 24 rows preferred the sharpest width of the grid
    in 9 of 15 folds, and the rule of succession over 24 rows set the share near 0.06,
    which costs every confidently right query 0.04 in log-loss. With every row held out
    the held-out log-loss of ``bench_classify.py``'s nine sets of at most 1 000 rows fell
    on all nine (iris 0.191 → 0.128, wine 0.089 → 0.075, breast_cancer 0.107 → 0.092,
    crabs 0.031 → 0.006), for five trainings instead of one.

    The default is fast: it starts from Fisher's discriminant directions (``init="lda"``,
    whitened within classes, the within-class covariance shrunk by Ledoit–Wolf, the width
    of the Gaussian then chosen by the same leave-one-out loss along a line), works in
    ``head_dim`` dimensions (by default ``2 (n_classes − 1)``, at most ``n_features``) and
    trains for at most ``max_iter=10`` L-BFGS iterations, with no inner validation. On
    scikit-learn's digits (1 797 × 64, standardized, 5-fold, three shuffles) it fitted 3.1
    times faster than :class:`~sklearn.neighbors.NeighborhoodComponentsAnalysis` (the
    median over the 15 folds, 1.7 to 5.7 on a two-core machine with AVX-512: NCA's own
    time varies threefold between folds; 2.1 times on a two-core machine with AVX2 but no
    AVX-512, where NCA's fit slowed down less than this one), with a held-out
    log-loss of 0.077 against 0.090 for gradient boosting and 0.176 for NCA with a tuned
    k-nearest vote. The budget is where the
    held-out log-loss stops improving: over the benchmark's ten sets the geometric mean of
    the log-loss ratios was 1.184 and 1.203 (two sets of three shuffles) at 10 iterations,
    1.202 and 1.200 at 15, 1.208 (the second set) at 30, where the digits fit took 1.3–1.5
    and 1.8 times as long. The benchmark ``examples/benchmarks/bench_classify.py`` prints
    these figures; over its ten sets the classifier's log-loss is 0.88 times the best
    reference's in the geometric mean (below it on wine, digits, biopsy, crabs, fgl and
    synth.tr; 1.45 times logistic regression's on iris, 1.12 on breast_cancer and
    kyphosis).

    Parameters
    ----------
    n_heads : int, default=1
        Attention heads; their weights are mixed convexly (learned softmax logits, the
        heads first trained under equal weights).
    head_dim : int or "auto", default="auto"
        Columns of each projection; ``"auto"`` is ``min(n_features, 2 (n_classes − 1))``
        (at least 1).
    similarity : {"gaussian", "dot", "cosine"}, default="gaussian"
        As for :class:`~kernattn.AttentionRegressor`.
    tie_qk : bool, default=True
        One projection for queries and keys (a learned metric for the Gaussian).
    scale : float, "learned" or None, default=None
        The multiplier of the similarity: ``None`` is :math:`1/\sqrt{d_{head}}`.
    loss : {"brier", "log"}, default="brier"
        The leave-one-out loss trained on (above).
    init : {"lda", "pca", "identity"} or array_like, default="lda"
        The first head's start (later heads start from random rotations of it, see
        :class:`~kernattn.AttentionRegressor`): Fisher's directions, the principal
        directions, the identity, or an array ``(n_features, head_dim)`` used as given;
        for the strings, scaled along a line to the lowest leave-one-out loss.
    alpha : float, default=0.0
        L2 penalty on the projections' off-diagonal entries (as for the regressor).
    max_iter : int, default=10
        L-BFGS iterations; 0 keeps the start. A budget, not a convergence criterion: the
        held-out rows keep the best parameters met, and reaching it is not warned about
        (with several heads it is shared by the phase under equal weights and the phase
        that trains the mixture, which may get none of it).
    tol : float, default=1e-4
    n_iter_no_change : int, default=10
        The stopping rule of :class:`~kernattn.AttentionRegressor`.
    class_weight : dict, "balanced" or None, default=None
        Multiplied into the sample weights.
    random_state : int, RandomState instance or None, default=None
    verbose : int, default=0
    n_jobs : int, default=None

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_prior_ : ndarray of shape (n_classes,)
    prior_share_ : float
        The share of the class frequencies in the probabilities (at least 1e-6).
    loo_log_loss_ : float
        The held-out log-loss of the smoothed probabilities (of every held-out row, or of
        the one validation fifth above 1 000 distinct inputs; below 20 distinct inputs the
        leave-one-out one).
    query_projection_, key_projection_ : ndarray of shape (n_heads, n_features, head_dim)
    scale_, head_weights_ : ndarray of shape (n_heads,)
    center_, input_scale_ : ndarray of shape (n_features,)
        The standardization of the inputs.
    width_factor_ : float
        The factor every head's logits were multiplied by after training, chosen by the
        held-out log-loss (1: as trained).
    loss_curve_ : list of float
        The leave-one-out loss per iteration (of the kept kernel's training).
    n_iter_ : int
        Its L-BFGS iterations.
    engine_ : NadarayaWatsonRegressor
        The engine of the one-hot codes (predictions, weights).
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    See Also
    --------
    kernattn.KernelClassifier : the fixed Gaussian product kernel.
    kernattn.AttentionRegressor : the same kernel for regression.
    sklearn.neighbors.NeighborhoodComponentsAnalysis : the metric of the same objective
        (without the log), as a transformer.

    References
    ----------
    .. [1] J. Goldberger, S. Roweis, G. Hinton, R. Salakhutdinov, "Neighbourhood Components
       Analysis", NeurIPS 2004.
    .. [2] G. W. Brier, "Verification of forecasts expressed in terms of probability",
       Monthly Weather Review 78 (1950).
    .. [3] T. Gneiting, A. E. Raftery, "Strictly proper scoring rules, prediction, and
       estimation", J. Amer. Statist. Assoc. 102 (2007).

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import AttentionClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 4))
    >>> y = np.array(["a", "b", "c"])[(X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)]
    >>> model = AttentionClassifier(random_state=0).fit(X, y)
    >>> model.predict_proba(X[:2]).sum(axis=1).round(12)
    array([1., 1.])
    >>> bool(model.score(X, y) > 0.9)
    True
    >>> weights = model.attention_weights(X[:1])
    >>> bool(weights.min() >= 0), weights.sum().round(12)
    (True, np.float64(1.0))
    """

    _parameter_constraints: dict = {
        **NadarayaWatsonClassifier._parameter_constraints,
        "n_heads": [Interval(Integral, 1, None, closed="left")],
        "head_dim": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "similarity": [StrOptions({"dot", "cosine", "gaussian"})],
        "tie_qk": ["boolean"],
        "scale": [Interval(Real, 0, None, closed="neither"), StrOptions({"learned"}), None],
        "loss": [StrOptions(set(LOSSES))],
        "init": [StrOptions(set(INITS)), "array-like"],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "n_jobs": [Integral, None],
    }
    # The held-out rows that choose the prior's share are a fifth of the data, after the
    # width was chosen on them: one unseen mistake keeps a confident kernel honest (with
    # 5-fold cross-validation, the held-out log-loss on wine fell from 0.36 to 0.15, on
    # iris from 0.15 to 0.11, on breast_cancer from 0.18 to 0.13).
    _succession = True

    def __init__(
        self,
        n_heads=1,
        head_dim="auto",
        similarity="gaussian",
        tie_qk=True,
        scale=None,
        loss="brier",
        init="lda",
        alpha=0.0,
        max_iter=10,
        tol=1e-4,
        n_iter_no_change=10,
        class_weight=None,
        random_state=None,
        verbose=0,
        n_jobs=None,
    ):
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.similarity = similarity
        self.tie_qk = tie_qk
        self.scale = scale
        self.loss = loss
        self.init = init
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.class_weight = class_weight
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs

    def _head_dim(self, n_features, n_classes):
        if self.head_dim == "auto":
            return max(1, min(n_features, 2 * (n_classes - 1)))
        return self.head_dim

    def _check_params(self, X):
        if not isinstance(self.init, str):
            W = np.asarray(self.init, dtype=float)
            if W.ndim != 2 or W.shape[0] != X.shape[1] or not np.all(np.isfinite(W)):
                raise ValueError(
                    "init must be 'lda', 'pca', 'identity' or a finite array of shape "
                    f"(n_features, head_dim) = ({X.shape[1]}, head_dim); got "
                    f"{np.shape(self.init)!r}"
                )

    def _fit_engine(self, X, Y, sample_weight):
        # The package's threads run the blocks of the objective; the small products around
        # them (the discriminant's scatter matrices and eigenproblem, L-BFGS's vectors) on
        # threaded BLAS spent 40 times as long waiting for busy cores as computing.
        with single_threaded_blas():
            return self._fit_heads_engine(X, Y, sample_weight)

    def _fit_heads_engine(self, X, Y, sample_weight):
        rng = check_random_state(self.random_state)
        keep = np.flatnonzero(sample_weight > 0)
        Xk, Yk, sw = X[keep], Y[keep], sample_weight[keep]
        d, n_classes = X.shape[1], Y.shape[1]
        user_init = None if isinstance(self.init, str) else np.asarray(self.init, dtype=float)
        head_dim = self._head_dim(d, n_classes) if user_init is None else user_init.shape[1]
        weights = sw / sw.sum()
        center, input_scale = standardization(Xk, sw)
        Z = (Xk - center) / input_scale
        groups = DuplicateGroups(Z)
        learn_scale = isinstance(self.scale, str)
        layout = Layout(self.n_heads, d, head_dim, n_classes, self.tie_qk, learn_scale, "convex")
        scale = initial_scale(self.scale, self.n_heads, head_dim)
        # The squared error's codes are centered (the regressor's convention), the
        # log-loss's are not (it reads the probability of the true class).
        offset = np.zeros(n_classes) if self.loss == "log" else weights @ Yk
        objective = LeaveOneOutObjective(
            Z,
            Yk - offset,
            sw,
            groups,
            layout,
            self.similarity,
            scale,
            self.alpha,
            n_jobs=self.n_jobs,
            loss="log" if self.loss == "log" else "squared",
        )
        # Held-out rows (whole duplicate groups) keep the training honest: the
        # leave-one-out loss of a metric with d × head_dim parameters, chosen by that same
        # loss, is optimistic, and probabilities trained on it alone are overconfident.
        fits = []
        for train, validation in self._held_out_splits(groups, rng):
            start = self._start(
                objective, layout, Z, Yk, sw, scale, head_dim, rng, user_init, train
            )
            fits.append(self._train(objective, layout, start, train, validation, rng))
        theta, self.n_iter_, self.loss_curve_ = fits[0].theta, fits[0].n_iter, fits[0].loss_curve
        if fits[0].rows is None:
            # No validation split: leave-one-out queries against every row.
            fits[0] = fits[0]._replace(rows=loo_queries(len(keep), rng), keys=None)
        log_factor, held_out = self._widest_honest(objective, fits, offset, Yk, sw, weights @ Yk)
        self.width_factor_ = float(np.exp(log_factor))
        theta = layout.widened(theta, log_factor)
        rows = np.concatenate([fit.rows for fit in fits])
        query, key, log_scale, a, _ = layout.unpack(theta)
        source = KernelSource(
            similarity=self.similarity,
            center=center,
            input_scale=input_scale,
            query_weights=query.copy(),
            key_weights=key.copy(),
            scale=scale if log_scale is None else np.exp(log_scale),
            head_weights=a.copy(),
            head_bias=np.zeros(n_classes),
        )
        engine = LabelEngine(source, n_jobs=self.n_jobs).fit(X, Y, sample_weight)
        return engine, (keep[rows], held_out)

    @staticmethod
    def _held_out_splits(groups, rng):
        """The (training, held-out) rows of each training: below ``MIN_VALIDATION_GROUPS``
        distinct inputs one training on all rows (``None`` held out); then a fifth of the
        duplicate groups held out; up to ``CROSS_FIT_GROUPS`` distinct inputs, the other
        groups split into four more held-out parts, so that every row is held out once."""
        if groups.n_groups < MIN_VALIDATION_GROUPS:
            return [(np.arange(len(groups.ids)), None)]
        train, validation = validation_split(groups, VALIDATION_FRACTION, rng)
        splits = [(train, validation)]
        if groups.n_groups > CROSS_FIT_GROUPS:
            return splits
        held = np.zeros(groups.n_groups, dtype=bool)
        held[groups.ids[validation]] = True
        rest = rng.permutation(np.flatnonzero(~held))
        for part in np.array_split(rest, CROSS_FIT_FOLDS - 1):
            in_part = np.zeros(groups.n_groups, dtype=bool)
            in_part[part] = True
            in_part = in_part[groups.ids]
            splits.append((np.flatnonzero(~in_part), np.flatnonzero(in_part)))
        return splits

    def _train(self, objective, layout, theta, train, validation, rng):
        """L-BFGS from ``theta`` on the ``train`` rows, keeping the parameters with the
        lowest loss of the ``validation`` rows: a :class:`HeldOutFit`."""
        if self.max_iter == 0 or objective.groups.n_groups < 2:
            return HeldOutFit(theta, 0, [float(objective.loss(theta))], validation, train)
        with warnings.catch_warnings():
            # A fixed budget of iterations is the default's design, not a failure.
            warnings.simplefilter("ignore", ConvergenceWarning)
            theta, n_iter, monitor = optimize(
                objective,
                theta,
                optimizer="lbfgs",
                train=train,
                validation=validation,
                max_iter=self.max_iter,
                tol=self.tol,
                n_iter_no_change=self.n_iter_no_change,
                learning_rate=0.0,
                batch_size=1,
                key_subsample=None,
                rng=rng,
                verbose=self.verbose,
                frozen_first=layout.slices["a"] if self.n_heads > 1 else None,
            )
        return HeldOutFit(theta, n_iter, monitor.loss_curve, validation, train)

    def _held_out_estimates(self, objective, fits, log_factor, offset):
        """Every training's estimates of the codes of its held-out rows against its keys
        (leave-one-out without a split), its logits multiplied by ``exp(log_factor)``, in
        the order of the trainings, plus the ``offset`` the objective's codes were centered
        by."""
        layout = objective.layout
        return (
            np.concatenate(
                [
                    held_out_estimates(
                        objective, layout.widened(fit.theta, log_factor), fit.rows, fit.keys
                    )
                    for fit in fits
                ]
            )
            + offset
        )

    def _widest_honest(self, objective, fits, offset, Y, sw, prior):
        """The logarithm of the factor every head's logits are multiplied by (on a grid of
        e^-3 to e^3 in steps of e^0.25) whose held-out log-loss, at its best prior share,
        is lowest: a temperature of the softmax, which widens (or sharpens) a kernel trained
        on its own rows to what held-out rows support. The loss pools every training's
        held-out rows (``fits``, :class:`HeldOutFit`). A cosine head with a fixed scale
        keeps its width (0). Returns the logarithm and the held-out estimates there
        (:meth:`_held_out_estimates`).

        The grid is searched in two passes, every fourth point and then the points around
        the best of those: 13 losses instead of 25, a sixth of the digits fit, with the same
        factor and prior share in all 100 fits of ``bench_classify.py``'s ten sets (two
        shuffles of 5 folds) as the whole grid."""
        if self.similarity == "cosine" and not objective.layout.learn_scale:
            return 0.0, self._held_out_estimates(objective, fits, 0.0, offset)
        rows = np.concatenate([fit.rows for fit in fits])
        unseen = unseen_weight(objective.Z[rows], sw[rows])
        estimates = {}

        def loss(log_factor):
            p = estimates[log_factor] = self._held_out_estimates(
                objective, fits, log_factor, offset
            )
            value = choose_prior_share(p, Y[rows], sw[rows], prior, unseen)[1]
            return value if np.isfinite(value) else np.inf

        # A grid, not a line search: beyond some width the loss is nearly flat (every
        # query's nearest key dominates), where a search would stop at a point set by
        # rounding; ties within rounding go to the wider kernel. Every COARSE-th point
        # first, then the points between the best of those and its neighbours.
        grid = np.arange(LOG_WIDTH_RANGE[0], LOG_WIDTH_RANGE[1] + 1e-9, LOG_WIDTH_STEP)
        losses = np.full(len(grid), np.nan)

        def best_of(points):
            for i in points:
                if np.isnan(losses[i]):
                    losses[i] = loss(grid[i])
            tried = np.flatnonzero(~np.isnan(losses))
            lowest = np.min(losses[tried])
            best = int(tried[np.flatnonzero(losses[tried] <= lowest + 1e-9 * abs(lowest))[0]])
            for log_factor in list(estimates):
                if log_factor != grid[best]:
                    del estimates[log_factor]  # only the best's estimates are kept
            return best

        coarse = best_of(range(0, len(grid), COARSE))
        near = range(max(coarse - COARSE + 1, 0), min(coarse + COARSE, len(grid)))
        best = grid[best_of(near)]
        return float(best), estimates[best]

    def _start(self, objective, layout, Z, Y, sw, scale, head_dim, rng, user_init, train):
        """The initial parameters: the first head's projection (``init``), later heads
        from random rotations of it, then (for a string ``init``) every projection scaled
        by the factor along that line with the lowest leave-one-out loss."""
        if user_init is not None:
            base = user_init
        elif self.init == "lda":
            base = discriminant_directions(Z[train], Y[train], sw[train], head_dim)
        else:
            base = initial_projections(self.init, Z[train], sw[train], 1, head_dim, rng)[0]
        W = initial_projections("identity", Z, sw, self.n_heads, head_dim, rng, base=base)

        def theta_at(log_factor):
            return uniform_start(layout, W * np.exp(log_factor), scale)

        if user_init is not None or self.similarity == "cosine" or objective.groups.n_groups < 2:
            return theta_at(0.0)
        # The width along the line: Gaussian and dot logits are quadratic in the factor.
        probe = train[sample_groups(DuplicateGroups(Z[train]), rng)]
        result = minimize_scalar(
            lambda c: objective.loss(theta_at(c), probe, probe),
            bounds=(-4.0, 4.0),
            method="bounded",
            options={"xatol": 1e-2},
        )
        return theta_at(float(result.x))

    # ------------------------------------------------------ fitted attributes

    def _fitted_kernel(self, name):
        check_is_fitted(self)
        return self.engine_.kernel_

    def _fitted_array(self, array):
        return array.copy()

    def prune_heads(self, heads):
        """A copy that keeps only ``heads``, their mixture weights renormalized to sum to 1
        (the probabilities stay a Nadaraya–Watson estimate; the projections and the prior's
        share are not retrained).

        Parameters
        ----------
        heads : array_like of int
            Distinct head indices.

        Returns
        -------
        pruned : AttentionClassifier
            With ``n_heads = len(heads)``.
        """
        check_is_fitted(self)
        keep = head_indices(heads, self.engine_.kernel_.n_heads)
        kernel = self.engine_.kernel_.select(keep)
        a = kernel.head_weights
        total = a.sum()
        a = a / total if total > 0 else np.full(len(keep), 1.0 / len(keep))
        pruned = copy.deepcopy(self)
        pruned.engine_.kernel_ = kernel.with_mixture(a, kernel.head_bias)
        pruned.n_heads = len(keep)
        return pruned
