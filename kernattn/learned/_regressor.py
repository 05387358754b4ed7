r"""``AttentionRegressor``: Nadaraya–Watson regression with a learned attention kernel.

Each head :math:`h` compares a query with the training inputs through learned projections
of the standardized inputs, :math:`q = u W_q^h`, :math:`k_i = u_i W_k^h`, and averages the
training targets with the softmax of the logits :math:`s_h\, \mathrm{sim}(q, k_i)`; the
heads' estimates are mixed convexly (a Nadaraya–Watson estimate again) or, on request,
affinely. The estimator holds the parameters, resolves their ``"auto"`` values and checks
them; ``fit`` hands them to the fitting layer (:func:`kernattn.learned._fit.fit_heads`: the
start, the training on the leave-one-out objective of :mod:`kernattn.learned._objective`,
the shrinkage, the degree, the width and the tilt), binds the result to the training rows
as a :class:`~kernattn._engine.heads.SoftmaxHeads` kernel with its local corrections, and
the shared Nadaraya–Watson engine predicts.
"""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

from kernattn._core.loo import DuplicateGroups
from kernattn._core.namespaces import in_caller_library
from kernattn._core.rows import out_of_core_predict
from kernattn._engine.regressor import NadarayaWatsonRegressor
from kernattn.learned._degree import DEGREE_STANDARD_ERRORS
from kernattn.learned._fit import fit_heads, heads_factory, unbalanced
from kernattn.learned._fitted import FittedHeadsMixin, HeadAnalysisMixin
from kernattn.learned._local import UNBALANCED_ROWS, corrected_kernel
from kernattn.learned._start import given_projections

__all__ = ["AttentionRegressor", "DEGREE_STANDARD_ERRORS", "UNBALANCED_ROWS"]

_INITS = ("loo", "identity", "pca", "random")
#: Above this many distinct training inputs, ``optimizer="auto"`` trains with Adam over
#: mini-batches of queries against a random subsample of keys: a cost linear in n.
LARGE_N = 10_000
#: Keys each query attends to per step in that regime (``key_subsample="auto"``).
AUTO_KEY_SUBSAMPLE = 4096
#: Adam steps per iteration in that regime (``max_iter`` and ``n_iter_no_change`` count them).
AUTO_STEPS = 32
#: ``tilt="auto"`` tilts the weights of data with at most this many features (fitted
#: exactly): with few directions most queries can be balanced, and one Newton solve per
#: query is cheap.
AUTO_TILT_FEATURES = 3
#: ... and at least this many distinct training inputs per parameter of a balance
#: (``n_features + 1``): the width and penalty of the tilt are chosen by leave-one-out, a
#: choice that a handful of distinct inputs cannot support.
AUTO_TILT_INPUTS = 5
#: ``warp="auto"`` warps one-dimensional inputs (fitted exactly) with this many pieces: in
#: one dimension a learned metric is only a bandwidth, and the warp makes it vary.
AUTO_WARP = 8
# Largest entry of a given init: the logits, quadratic in it, stay far from overflowing.
_LARGEST_INIT = 1e100


def _resolved_options(tilt, warp, degree, n_features, n_groups):
    """``tilt`` (the kinds of :mod:`kernattn._local.tilt` to choose among, none for no tilt)
    and ``warp`` as fitted: ``"auto"`` tilts the weights of data with at least
    ``AUTO_TILT_INPUTS * (n_features + 1)`` distinct inputs (unless ``degree=1``) along each
    query's local slope for at most ``AUTO_TILT_FEATURES`` features and along the targets'
    trend beyond, and warps one-dimensional inputs with ``AUTO_WARP`` pieces, both only up
    to ``LARGE_N`` distinct training inputs (fitted exactly); ``True`` is ``"balance"``."""
    exact = n_groups <= LARGE_N
    if tilt == "auto":
        tilts = ()
        if exact and degree != 1 and n_groups >= AUTO_TILT_INPUTS * (n_features + 1):
            tilts = ("slope",) if n_features <= AUTO_TILT_FEATURES else ("trend", "slope")
    else:
        tilts = () if tilt is False else ("balance" if tilt is True else tilt,)
    if isinstance(warp, str):
        warp = AUTO_WARP if exact and n_features == 1 else 0
    return tilts, int(warp)


def _training_plan(optimizer, key_subsample, n_groups):
    """The optimizer, the keys per step and the Adam steps per iteration.

    ``"auto"`` trains exactly (L-BFGS against every key) up to ``LARGE_N`` distinct
    training inputs, and beyond with Adam over mini-batches of queries against
    ``AUTO_KEY_SUBSAMPLE`` random keys, an iteration being ``AUTO_STEPS`` steps (an
    epoch would grow with n)."""
    large = n_groups > LARGE_N
    steps = None
    if optimizer == "auto":
        optimizer = "adam" if large else "lbfgs"
        steps = AUTO_STEPS if large else None
    if key_subsample == "auto":
        key_subsample = AUTO_KEY_SUBSAMPLE if large else None
    return optimizer, key_subsample, steps


#: Fitted attributes that only some fits have.
_CONDITIONAL_ATTRIBUTES = (
    "validation_scores_",
    "warp_knots_",
    "warp_slopes_",
    "width_factor_",
    "line_width_factor_",
    "tilt_penalty_",
)


class AttentionRegressor(FittedHeadsMixin, HeadAnalysisMixin, NadarayaWatsonRegressor):
    r"""Nadaraya–Watson regression whose kernel is multi-head attention, learned by
    leave-one-out.

    A query :math:`x` is standardized to :math:`u = (x - c)/\sigma` (``center_``,
    ``input_scale_``), and head :math:`h` makes logits against every training input
    :math:`x_i`,

    .. math::

        \ell^h_i = s_h\, \mathrm{sim}(u W_q^h,\; u_i W_k^h) + \log s_i,

    with ``sim`` the dot product, the cosine, or :math:`-\tfrac12\|q - k\|^2`, :math:`s_h`
    the head's scale (``scale_``) and :math:`s_i` the sample weights. Its estimate is the
    softmax average of the training targets (the values),
    :math:`\hat y_h(x) = \sum_i \mathrm{softmax}(\ell^h)_i\, y_i`, and the prediction is the
    mixture :math:`\hat y(x) = \sum_h a_h \hat y_h(x) + b` (``head_weights_``,
    ``head_bias_``). By default the mixture is convex (:math:`a_h \ge 0`,
    :math:`\sum_h a_h = 1`, :math:`b = 0`): the prediction is then itself a Nadaraya–Watson
    estimate, with weights :math:`\sum_h a_h w^h_i(x)` that sum to 1, and stays inside the
    range of the training targets. The projections :math:`W_q^h, W_k^h`, the mixture and (with
    ``scale="learned"``) the scales minimize the leave-one-out squared error, in which
    training point :math:`i` is predicted from the other points (its exact duplicates
    left out too), plus ``alpha`` times the squared off-diagonal entries of the
    projections. The loss is divided by the targets' variance: ``loss_curve_`` reads as a
    leave-one-out :math:`1 - R^2`.

    The defaults, ``similarity="gaussian"``, ``tie_qk=True`` and one head, are Metric
    Learning for Kernel Regression [1]_: the Gaussian smoother with the learned metric
    :math:`s W W^\top`, a local kernel (chosen by 5-fold cross-validation on the package's
    tasks and on real data, against the dot product); with :math:`W = \mathrm{diag}(1/h)`,
    ``scale=1.0``, ``standardize=False`` and ``max_iter=0`` it is exactly
    :class:`~kernattn.KernelSmoother` with bandwidth :math:`h`. By default training starts
    there, at the smoother's leave-one-out bandwidths (``init="loo"``), the trained metric is
    taken back toward that start as far as an inner validation says (``shrinkage="auto"``:
    the leave-one-out loss of a full metric is optimistic), and each query's weights are
    tilted until the keys balance about it along the local slope of the targets or along
    their linear trend (``tilt="auto"``): the kernel average's bias from a denser side of
    the data or a slope is removed with weights that stay non-negative and sum to 1, so the
    default is Nadaraya–Watson in every dimension, with any number of heads. The ``"dot"``
    kernel with :math:`W_q \ne W_k` is asymmetric and not local by itself: in low dimension
    it misses local structure (about 3× worse than the Gaussian on the motorcycle data).

    Parameters
    ----------
    n_heads : int, default=1
        Number of attention heads, each with its own projections and scale; their
        estimates are mixed with learned weights (see ``head_mixture``).
    head_dim : int, default=None
        Columns of each projection (the dimension of queries and keys); ``None`` means
        ``n_features``.
    similarity : {"dot", "cosine", "gaussian"}, default="gaussian"
        How a head compares a query with a key: :math:`q^\top k`, the cosine of their
        angle, or :math:`-\tfrac12\|q - k\|^2`. The cosine is bounded, so only its scale
        sets how sharp the kernel is: use it with ``scale="learned"``.
    tie_qk : bool, default=True
        Share one projection for queries and keys (a symmetric kernel; with the Gaussian
        similarity, a learned metric).
    head_mixture : {"convex", "affine"}, default="convex"
        How the heads' estimates are combined. ``"convex"``: non-negative head weights
        summing to one (the softmax of one learned logit per head) and no bias, so the
        prediction is a Nadaraya–Watson estimate whose weights (``attention_weights``) sum to
        1 and which stays inside ``[min y, max y]``. ``"affine"``: free weights and a bias,
        the analogue of a transformer's output projection; this goes beyond Nadaraya–Watson
        (the weights need not sum to 1, the prediction can leave the targets' range, and
        the output can stretch small differences between heads).
    degree : {0, 1} or "auto", default=0
        0: each head's estimate is the softmax average of the targets (Nadaraya–Watson),
        tilted as ``tilt`` says: the default, and the only degree whose weights are a
        distribution. 1 and ``"auto"`` leave the Nadaraya–Watson family: their equivalent
        weights can be negative and their predictions can leave ``[min y, max y]``.
        1: each head fits a weighted least-squares line at the query in its key space
        (weighted by its softmax weights) and predicts its value there, the local-linear
        estimate, with equivalent weights :math:`l_i = w_i (1 + (k_i - m)^\top C^{-1}(k(x)
        - m))` that sum to 1; every head's logits are then multiplied by one factor
        (``width_factor_``, in ``scale_``) chosen by the leave-one-out error of the lines. A
        query whose local design cannot support its line (:math:`\sum_i l_i^2 > 4`) is held
        back toward the kernel average, as the smoother's local polynomials are
        (``held_back_``, and a :class:`~kernattn.LocalDesignWarning` in ``predict``).
        ``"auto"``: the blend :math:`(1 - s)\,\hat y_0 + s\,\hat y_1` of the local constant
        and the line, each at its own width (``line_width_factor_``), with the line's share
        :math:`s` (``line_share_``) the smallest of 0, 1/4, …, 1 within one standard error of
        the lowest held-out error on the folds of ``shrinkage``'s inner validation
        (:mod:`kernattn.learned._degree`, with the measurements behind it); ``degree_`` is
        1 when the line has a share.
    tilt : {"auto", "slope", "trend", "balance"} or bool, default="auto"
        Tilt each head's weights at each query, :math:`\tilde w_i \propto w_i
        e^{\lambda^\top k_i}`, with :math:`\lambda` chosen so that the keys balance about the
        query's key (:mod:`kernattn._local.tilt`): still a softmax, so the estimate stays
        Nadaraya–Watson, without the kernel average's bias from a denser side of the data
        or a slope. ``"slope"``: the balance along each query's local slope of the targets
        (two keys suffice); ``"trend"``: along the targets' linear trend over all keys;
        ``"balance"`` (or ``True``): in every direction of the key space. A penalty
        :math:`\varepsilon` (``tilt_penalty_``) keeps the tilt bounded beyond the edge of
        the data (``unbalanced_`` counts the rows left unbalanced); the width
        (``width_factor_``) and :math:`\varepsilon` are chosen by the leave-one-out error
        of the tilted estimate. ``"auto"``: ``"slope"`` with one to three features, beyond
        ``"trend"`` or ``"slope"``, whichever has the lower leave-one-out error; only with
        ``degree``
        not 1, at least ``5 * (n_features + 1)`` distinct inputs and an exact fit (at most
        ``LARGE_N``). ``tilt_`` records the kind (or ``False``). Needs ``degree`` 0 or
        ``"auto"``. The choices and their measurements: :mod:`kernattn.learned._local`.
    warp : int or "auto", default="auto"
        Number of pieces of a learned monotone warp of each standardized input (0: no
        warp). Each feature goes through an increasing, continuous, piecewise-linear
        function with knots at ``warp + 1`` quantiles of its training values and one
        learned slope per piece (the end pieces extend outward), learned with the
        projections by the leave-one-out loss; ``alpha`` times the squared differences
        of neighboring log-slopes keeps it smooth. A Gaussian head on warped inputs has a
        bandwidth that varies along each feature (narrow where the target changes fast,
        wide where it is flat); the weights are still a softmax of the logits, so with
        ``degree=0`` and the convex mixture the estimate is still Nadaraya–Watson.
        ``"auto"``: 8 pieces for one-dimensional inputs fitted exactly (at most
        ``LARGE_N`` distinct training inputs), where a learned metric is only a bandwidth
        and the warp lets it vary; no warp otherwise. ``warp_`` records the choice.
    leave_one_out : bool, default=True
        Train on the leave-one-out loss, where each training point is predicted from the
        others. ``False`` trains on the resubstitution loss (each point predicted with
        itself among the keys), which is minimized by a kernel that collapses onto the
        query's own key: the training loss goes to 0 while the test error grows. It is
        there to show that failure, not for use.
    scale : float, "learned" or None, default=None
        The multiplier of the similarity, as in PyTorch's
        ``scaled_dot_product_attention``: ``None`` is :math:`1/\sqrt{d_{head}}` (unit logit
        variance for unit-variance queries and keys), a positive float is used as given
        (``1.0``: no scaling), ``"learned"`` learns one per head, starting at
        :math:`1/\sqrt{d_{head}}`.
    init : {"loo", "identity", "pca", "random"} or array_like, default="loo"
        Initial projections. ``"loo"``: the per-feature bandwidths :math:`h_j` that
        :class:`~kernattn.KernelSmoother` selects by leave-one-out
        (:func:`~kernattn.bandwidth.select_bandwidth` on the standardized inputs), as the
        diagonal projection :math:`W = \mathrm{diag}(1/h) / \sqrt{s}`: with the Gaussian
        similarity the first head starts at that smoother (with ``max_iter=0``,
        ``tilt=False`` and ``warp=0`` it predicts as the smoother with those bandwidths;
        :mod:`kernattn.learned._start`). Otherwise the identity (truncated or padded to
        ``head_dim``), the leading principal directions of the standardized inputs, or
        Gaussian; each scaled so that the initial logits have unit within-query variance
        (so is ``"loo"`` for the dot and cosine similarities). Heads after the first start
        from a random rotation of the first head's projection with the features weighed by
        random factors (log-normal, σ = 0.5); with a convex mixture they are first trained
        under equal weights, then with the mixture. An array of shape ``(n_features,
        head_dim)`` (every head) or ``(n_heads, n_features, head_dim)`` is used as given,
        for queries and keys (heads that start identical stay identical: give one array
        per head).
    alpha : float, default=1.0
        L2 penalty on the off-diagonal entries of the projections, weighed against the sum
        of squared leave-one-out errors divided by the targets' variance (as ridge
        regression's ``alpha`` against its sum of squares), so it fades as the sample
        grows. A diagonal projection weighs each feature by its own factor, as per-feature
        bandwidths do: the penalty shrinks the kernel towards the Gaussian smoother with
        per-feature bandwidths (chosen freely by the leave-one-out loss), not towards a
        kernel that ignores the inputs. In one dimension nothing is penalized.
    shrinkage : float in [0, 1], "auto" or None, default="auto"
        How far the trained parameters :math:`\theta_1` are taken back toward the start
        :math:`\theta_0` (for ``init="loo"`` the smoother's diagonal metric):
        :math:`\theta = \theta_1 + \lambda(\theta_0 - \theta_1)`, :math:`\lambda` =
        ``shrinkage_`` (the leave-one-out loss of a metric chosen by that same loss is
        optimistic). ``"auto"`` chooses :math:`\lambda` among 0, 1/4, …, 1 by an inner
        validation on 3 folds of the duplicate groups, each trained from its own start: the
        largest :math:`\lambda` within one standard error of the lowest held-out error
        (:mod:`kernattn.learned._shrinkage`). It runs only when the fit is exact (at most
        ``LARGE_N`` distinct inputs), trains (``max_iter > 0``), is not warm-started and has
        at least 15 distinct inputs; otherwise ``"auto"`` is 0. A float is used as given;
        0 or ``None``: the trained parameters.
    optimizer : {"auto", "lbfgs", "adam"}, default="auto"
        Full-batch L-BFGS with the analytic gradient, or Adam over mini-batches of queries
        (whole duplicate groups) attending to all keys, or to ``key_subsample`` of them.
        ``"auto"``: L-BFGS up to ``LARGE_N = 10 000`` distinct training inputs, Adam beyond
        (with ``key_subsample="auto"``, a cost per epoch linear in n).
    learning_rate : float, default=0.01
        Adam's step size.
    batch_size : int, default=256
        Queries per Adam step.
    key_subsample : int, "auto" or None, default="auto"
        Adam only: each step's queries attend to this many randomly drawn keys (groups of
        duplicates) instead of all of them, for large n. ``None``: all keys. ``"auto"``:
        4 096 above ``LARGE_N`` distinct training inputs, all keys below.
    max_iter : int, default=200
        L-BFGS iterations or Adam epochs; 0 keeps the initial kernel (no training). With
        ``optimizer="auto"`` above ``LARGE_N`` distinct training inputs, an iteration is 32
        Adam steps instead of an epoch (an epoch grows with n; training can end within
        the first few).
        Reaching it before the stopping rule ends training raises a ``ConvergenceWarning``.
    tol : float, default=1e-4
        Training stops when the loss (the leave-one-out loss, or the validation loss with
        ``early_stopping``) has improved by less than ``tol`` (relative) over the last
        ``n_iter_no_change`` iterations or epochs, for L-BFGS and Adam alike (for Adam's
        epoch losses, which vary with the mini-batches, the mean over those epochs is
        compared with the mean over the epochs before).
    n_iter_no_change : int, default=10
        The window of that stopping rule.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training inputs (whole duplicate groups),
        train on the rest, and keep the parameters with the lowest loss of the held-out
        queries against the training keys. The fitted estimator attends to all rows.
    validation_fraction : float, default=0.1
        Fraction of the distinct training inputs held out with ``early_stopping``; in
        (0, 1).
    standardize : bool, default=True
        Standardize the inputs (weighted mean and standard deviation; a constant feature
        gets scale 1) before projecting, so the initial scaling and ``alpha`` mean the same
        for every feature's units.
    random_state : int, RandomState instance or None, default=None
        For the initial projections, the validation split and Adam's batches.
    warm_start : bool, default=False
        Start from the previous fit's parameters (when their shapes match). A warm fit
        runs no inner validation: ``shrinkage="auto"`` keeps the parameters where training
        ends (``shrinkage_ = 0``) and ``degree="auto"`` keeps the previous fit's share of
        the local line (``line_share_``); the widths are tuned again.
    verbose : int, default=0
        Print a progress line at every iteration or epoch: its number out of ``max_iter``,
        the loss, the gradient norm and the time elapsed.
    n_jobs : int, default=None
        Threads over blocks of queries, for training and prediction of large problems:
        ``None`` all cores (or the ``n_jobs`` of an enclosing ``joblib.parallel_config``),
        −1 all cores, a positive number that many. A thread limit set around the call with
        ``threadpoolctl.threadpool_limits`` is honored. The result does not depend on it
        (up to rounding).

    Attributes
    ----------
    kernel_ : SoftmaxHeads
        The fitted kernel: the heads' projections, scales and mixture, bound to the training
        inputs. The attributes below are read from it.
    query_projection_, key_projection_ : ndarray of shape (n_heads, n_features, head_dim)
        :math:`W_q^h, W_k^h`, applied to the standardized inputs (equal with ``tie_qk``).
    scale_ : ndarray of shape (n_heads,)
        :math:`s_h`, the multiplier of each head's similarity.
    head_weights_ : ndarray of shape (n_heads,)
        :math:`a_h`, the weight of each head's estimate in the mixture.
    head_bias_ : ndarray of shape (n_outputs,)
        :math:`b`, in target units: ``predict(X) = Σ_h head_weights_[h] ŷ_h(X) + head_bias_``.
    center_, input_scale_ : ndarray of shape (n_features,)
        The standardization :math:`u = (x - c)/\sigma` (zeros and ones without
        ``standardize``).
    degree_ : int
        The degree of the fitted estimate (``degree``, with ``"auto"`` resolved).
    shrinkage_ : float
        :math:`\lambda`, the share of the way from the trained parameters back to the
        start (``shrinkage``, with ``"auto"`` resolved; 0 without training).
    tilt_ : str or False
        The kind of tilt of the weights, ``"slope"``, ``"trend"`` or ``"balance"``, or
        ``False`` (``tilt``, with ``"auto"`` resolved and ``True`` read as ``"balance"``).
    unbalanced_ : float
        The share of the training rows (at most 512, evenly spread) whose leave-one-out
        tilt cannot reach its balance in some head (outside the range of the keys its
        weights reach, :func:`~kernattn.learned._local.unbalanced_share`): their weight
        rests on the outermost keys. 0 without a tilt.
    warp_ : int
        :math:`P`, the number of pieces of the warp (``warp``, with ``"auto"`` resolved; 0:
        none).
    warp_knots_ : ndarray of shape (n_features, P + 1)
        The knots :math:`t_0 < \dots < t_P` of each feature's warp, in standardized units
        (only with ``warp_ > 0``).
    warp_slopes_ : ndarray of shape (n_features, P)
        The slope of each piece of each feature's warp: the heads project
        :math:`\phi(u)` with :math:`\phi(u) = t_0 + \sum_p \text{slope}_p
        (\min(\max(u, t_p), t_{p+1}) - t_p)` (the end pieces unbounded outward) instead of
        :math:`u` (only with ``warp_ > 0``).
    width_factor_ : float
        The factor of every head's logits chosen for the local lines or the tilted weights
        (only with ``degree_ = 1`` or ``tilt_``; already part of ``scale_``). In a blend of
        the constant and the line, the constant's (1 untilted).
    line_share_ : float
        :math:`s`, the local line's share of the estimate: 0 for the local constant
        (``degree_ = 0``), 1 for the line alone, in between a blend (``degree="auto"``).
    line_width_factor_ : float
        The factor of the line's logits, relative to the learned ``scale`` (only with
        ``degree_ = 1``; in a blend the line's kernel is a copy of the heads with it).
    held_back_ : float
        The share of the training rows (at most 512, evenly spread in the order of their
        inputs) whose leave-one-out local line is held back in some head; 0 for
        ``degree=0`` (a prediction counts its own in a :class:`~kernattn.LocalDesignWarning`).
    tilt_penalty_ : float
        :math:`\varepsilon`, the weight of the penalty on the tilt chosen by leave-one-out
        (only with ``tilt_``).
    loss_curve_ : list of float
        Training loss (leave-one-out :math:`1 - R^2` plus penalty) per iteration or epoch.
    validation_scores_ : list of float
        Held-out loss per iteration (only with ``early_stopping``).
    n_iter_ : int
        Iterations (L-BFGS) or epochs (Adam) run.
    X_fit_, y_fit_, sample_weight_ : ndarray
        The training set (the keys and values the queries attend to).
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of the features seen during ``fit`` (only when ``X`` has string column
        names).

    See Also
    --------
    kernattn.KernelSmoother : the fixed-kernel estimator (no learning).
    kernattn.LinearAttentionRegressor : an approximation of the kernel by features, linear
        in n.

    References
    ----------
    .. [1] K. Q. Weinberger, G. Tesauro, "Metric Learning for Kernel Regression",
       AISTATS 2007.
    .. [2] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    .. [3] E. A. Nadaraya, "On estimating regression", Theory Probab. Appl. 9 (1964).

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import AttentionRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = np.sin(X[:, 0])
    >>> model = AttentionRegressor(random_state=0).fit(X, y)
    >>> bool(model.score(X, y) > 0.9)
    True
    >>> model.degree_, model.tilt_, model.warp_  # NW, balanced along each local slope
    (0, 'slope', 0)
    >>> 0.0 <= model.shrinkage_ <= 1.0  # how far the metric went back to its start
    True
    >>> weights = model.attention_weights(X[:2])
    >>> bool(weights.min() >= 0), weights.sum(axis=1).round(12)
    (True, array([1., 1.]))
    >>> bool(np.allclose(weights @ y, model.predict(X[:2])))
    True

    The local line blended with the constant (``degree="auto"``) leaves Nadaraya–Watson:
    its equivalent weights can be negative.

    >>> blend = AttentionRegressor(degree="auto", random_state=0).fit(X, y)
    >>> blend.degree_, blend.line_share_
    (1, 0.25)
    >>> bool(blend.attention_weights(X).min() < 0)
    True

    The plain softmax of the scaled Gaussian score, the tilt, the warp and the line turned
    off:

    >>> plain = AttentionRegressor(tilt=False, warp=0, degree=0, random_state=0).fit(X, y)
    >>> plain.scale_.round(4)
    array([0.5774])

    One input: by default a learned warp (a variable bandwidth); local lines on the warp:

    >>> x = np.sort(rng.uniform(0, 3, size=(150, 1)), axis=0)
    >>> y = np.where(x[:, 0] < 1.5, 0.0, np.sin(6 * x[:, 0])) + 0.1 * rng.normal(size=150)
    >>> warped = AttentionRegressor(random_state=0).fit(x, y)
    >>> warped.warp_slopes_.shape
    (1, 8)
    >>> lines = AttentionRegressor(degree=1, random_state=0).fit(x, y)
    >>> lines.warp_, lines.tilt_, bool(lines.width_factor_ > 0)
    (8, False, True)
    """

    _parameter_constraints: dict = {
        **NadarayaWatsonRegressor._parameter_constraints,
        "n_heads": [Interval(Integral, 1, None, closed="left")],
        "head_dim": [Interval(Integral, 1, None, closed="left"), None],
        "similarity": [StrOptions({"dot", "cosine", "gaussian"})],
        "tie_qk": ["boolean"],
        "head_mixture": [StrOptions({"convex", "affine"})],
        "degree": [Interval(Integral, 0, 1, closed="both"), StrOptions({"auto"})],
        "tilt": ["boolean", StrOptions({"auto", "balance", "slope", "trend"})],
        "warp": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "leave_one_out": ["boolean"],
        "scale": [Interval(Real, 0, None, closed="neither"), StrOptions({"learned"}), None],
        "init": [StrOptions(set(_INITS)), "array-like"],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "shrinkage": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"}), None],
        "optimizer": [StrOptions({"auto", "lbfgs", "adam"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "key_subsample": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "standardize": ["boolean"],
        "random_state": ["random_state"],
        "warm_start": ["boolean"],
        # "boolean" as well: verbose=True is a valid level of verbosity.
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_heads=1,
        head_dim=None,
        similarity="gaussian",
        tie_qk=True,
        head_mixture="convex",
        degree=0,
        tilt="auto",
        warp="auto",
        leave_one_out=True,
        scale=None,
        init="loo",
        alpha=1.0,
        shrinkage="auto",
        optimizer="auto",
        learning_rate=0.01,
        batch_size=256,
        key_subsample="auto",
        max_iter=200,
        tol=1e-4,
        n_iter_no_change=10,
        early_stopping=False,
        validation_fraction=0.1,
        standardize=True,
        random_state=None,
        warm_start=False,
        verbose=0,
        n_jobs=None,
    ):
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.similarity = similarity
        self.tie_qk = tie_qk
        self.head_mixture = head_mixture
        self.degree = degree
        self.tilt = tilt
        self.warp = warp
        self.leave_one_out = leave_one_out
        self.scale = scale
        self.init = init
        self.alpha = alpha
        self.shrinkage = shrinkage
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.key_subsample = key_subsample
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.standardize = standardize
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.n_jobs = n_jobs

    # ----------------------------------------------------------------- checks

    def _check_params(self):
        super()._check_params()
        if self.tilt is not False and self.tilt != "auto" and self.degree == 1:
            raise InvalidParameterError(
                f"tilt={self.tilt!r} balances the kernel average (degree=0); a local line "
                "(degree=1) is balanced already. Use one of them."
            )
        if not isinstance(self.init, str):
            try:
                W = np.asarray(self.init, dtype=float)
            except (TypeError, ValueError):
                raise InvalidParameterError(
                    "init must be 'identity', 'pca', 'random' or an array of numbers; got "
                    f"{self.init!r}"
                ) from None
            if not np.all(np.isfinite(W)):
                raise InvalidParameterError("init must contain only finite values")
            if np.abs(W).max(initial=0.0) > _LARGEST_INIT:
                # The logits are quadratic in the projections of standardized inputs: beyond
                # this they overflow (NaN losses and predictions), and the softmax would be
                # one-hot with a zero gradient long before.
                raise InvalidParameterError(
                    f"init must hold projections of at most {_LARGEST_INIT:g} in absolute "
                    f"value (they act on standardized inputs); got {np.abs(W).max():g}. "
                    "Scale it down, or use init='identity'."
                )

    # ---------------------------------------------------------------- fitting

    def _fit_kernel(self, X, Y, sample_weight):
        d = X.shape[1]
        head_dim = d if self.head_dim is None else self.head_dim
        # A given init must fit the data: checked before any work.
        user_init = None
        if not isinstance(self.init, str):
            user_init = given_projections(self.init, self.n_heads, d, head_dim)
        groups = DuplicateGroups(X)
        tilts, warp = _resolved_options(self.tilt, self.warp, self.degree, d, groups.n_groups)
        optimizer, key_subsample, steps = _training_plan(
            self.optimizer, self.key_subsample, groups.n_groups
        )
        plan = dict(
            tilts=tilts, warp=warp, optimizer=optimizer, key_subsample=key_subsample, steps=steps
        )
        previous = None
        if self.warm_start and hasattr(self, "kernel_"):
            previous = dict(
                kernel=self.kernel_,
                warp_slopes=getattr(self, "warp_slopes_", None),
                width_factor=getattr(self, "width_factor_", 1.0),
                line_share=getattr(self, "line_share_", None),
            )
        fit = fit_heads(
            X,
            self._values,
            sample_weight,
            groups,
            self.get_params(deep=False),
            head_dim=head_dim,
            user_init=user_init,
            plan=plan,
            previous=previous,
        )
        heads = heads_factory(
            fit,
            similarity=self.similarity,
            keys=X,
            log_sample_weight=self._log_sample_weight,
            dtype=self._dtype,
        )
        kernel = corrected_kernel(
            heads,
            fit.constant,
            fit.line,
            fit.share,
            sample_weight=self.sample_weight_[self._active],
            tilt_values=self._values / fit.target_unit,
            lines=(self._value_columns, self._values / self._value_scale),
        )
        fitted = fit.attributes
        if fitted["degree_"] == 1:
            fitted["held_back_"] = self._held_back_share(kernel, X)
        fitted["unbalanced_"] = unbalanced(fit)
        for name in _CONDITIONAL_ATTRIBUTES:
            # Only what this fit found: a conditional attribute of an earlier fit goes.
            if hasattr(self, name):
                delattr(self, name)
        for name, value in fitted.items():
            setattr(self, name, value)
        return kernel

    # ------------------------------------------------------ fitted attributes

    def _fitted_kernel(self, name):
        try:
            return self.__dict__["kernel_"]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r} before it is fitted"
            ) from None

    def _fitted_array(self, array):
        """A view that cannot be written to: the fitted kernel's keys were projected with
        it."""
        view = array.view()
        view.flags.writeable = False
        return view

    @property
    def head_bias_(self):
        """The bias :math:`b` of the mixture, in target units (0 for a convex mixture)."""
        kernel = self._fitted_kernel("head_bias_")
        a = kernel.head_weights
        if not np.any(kernel.head_bias) and abs(a.sum() - 1.0) <= 1e-12 and np.all(a >= 0):
            # A convex mixture: its weights sum to 1 up to rounding, and it has no bias.
            return np.zeros_like(kernel.head_bias)
        return kernel.head_bias + (1.0 - a.sum()) * self._y_offset

    # ------------------------------------------------------------- predicting

    @in_caller_library
    def predict(self, X, return_std=False, heads=None):
        r"""Mixed Nadaraya–Watson estimate of the heads (local-linear with ``degree=1``).

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        return_std : bool, default=False
            Also return the spread of the targets the heads attend to around the estimate,
            :math:`\sqrt{\sum_h \pi_h \sum_i w^h_i (y_i - \hat y)^2}` with
            :math:`\pi_h = |a_h| / \sum_g |a_g|`: the weighted standard deviation of the
            targets for one head.
        heads : array_like of int, default=None
            Predict with these heads only; every other head's estimate is replaced by the
            training mean of the targets (mean ablation) and the mixture is not re-fitted
            (:meth:`prune_heads` re-fits it).

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) or (n_queries, n_outputs)
        y_std : ndarray of the same shape
            Only when ``return_std=True``.
        """
        backend = out_of_core_predict(X)
        if backend is not None:
            return backend(self, X, return_std=return_std, heads=heads)
        X = self._validate_queries(X)
        heads = self._check_heads(heads)
        return self._finish_prediction(*self._predict_centered(X, return_std, heads=heads))
