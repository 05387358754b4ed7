r"""The local corrections of :class:`~kernattn.AttentionRegressor`: local lines
(``degree=1``) and tilted weights (``tilt``).

A head's softmax weights :math:`w_j(x)` define, at each query, a weighted least-squares line
in the head's key space: with the query's key-side projection :math:`k(x)`, the keys
:math:`k_j`, their weighted mean :math:`m` and covariance :math:`C`, the line's value at the
query is

.. math::

    \hat y(x) = \sum_j l_j(x)\, y_j, \qquad
    l_j(x) = w_j \bigl(1 + (k_j - m)^\top C^{-1} (k(x) - m)\bigr)

(the local polynomial of degree 1, :func:`kernattn._local.polynomial.equivalent_weights`:
held back toward the kernel average where its local design cannot support it, in the width's
tuning as in prediction).
The equivalent weights :math:`l_j` sum to 1 but can be negative: this goes beyond
Nadaraya–Watson (it removes the kernel average's bias at the edges of the data and on slopes,
and can leave the targets' range). The kernel's width is re-tuned for the line: the logits
are multiplied by the factor :math:`c` that minimizes the leave-one-out error of the
local-linear estimate (a line wants more neighbors than an average).

Everything needs only the sums :math:`\sum_j w_j [1, k_j, k_j k_j^\top, y_j, y_j k_j^\top]`:
:func:`kernattn._local.polynomial.polynomial_estimate` (degree 1) turns them into the
estimate.

The tilted weights (:mod:`kernattn._local.tilt`) balance the keys about the query with
non-negative weights instead: the estimate stays Nadaraya–Watson. Their width is re-tuned
in the same way, by the leave-one-out error of the tilted estimate.

**The tilt.** The tilted weights are the weights closest to the softmax's in
Kullback–Leibler divergence with the balance: still a softmax (of the logits plus
:math:`\lambda^\top k_i`), non-negative and summing to 1. A kernel average's leading bias
has a slope term wherever the keys about a query are not balanced (a denser side, the edge
of the data); a local line removes it with signed weights, the tilt with non-negative ones.
``"slope"`` balances along each query's local slope of the targets :math:`\beta(x)` (the
weighted least-squares slope in the head's key space under its softmax weights),
:math:`\sum_i \tilde w_i \beta^\top k_i = \beta^\top k(x)`: to first order the local line's
correction, :math:`\hat y \approx \bar y + \beta^\top (k(x) - m)`, made by non-negative
weights, and a balance along one direction needs two keys, not ``head_dim + 1``.
``"trend"`` balances along one fixed direction, the targets' least-squares slope over all
keys: less local, far less noisy with many features and few rows. ``"balance"`` balances
in every direction, :math:`\sum_i \tilde w_i k_i = k(x)`, as a local line does (a Newton
solve per query whose cost grows with ``head_dim`` squared; with many features few queries
can be balanced in every direction). Beyond the edge of the data no balance can be
reached: a penalty, :math:`\varepsilon/2` times the variance of the log-factors under the
softmax weights, keeps the tilt bounded and the weights on the outermost keys. The
projections are learned untilted; then every head's logits are multiplied by a factor (a
balance wants more neighbours than an average) chosen by the leave-one-out error of the
tilted estimate among seven widenings by :math:`\sqrt 2` (``DIRECTION_WIDTHS``), with
:math:`\varepsilon = 1/16` along the slope, among 1/16 and 1 along the trend
(``TREND_PENALTIES``), among 1/16, 1 and 16 for ``"balance"``.

``tilt="auto"`` takes the slope with one to three features; beyond, the trend, or the slope
where its leave-one-out error is below the trend's by more than one standard error of their
paired differences (:func:`choose_tilt`). Measured on 17 of R's data sets
(``examples/benchmarks/bench_attention.py``), the local slope is the better direction with
few features, and with more features on few rows the trend (its leave-one-out choice
against the slope was noisier than the gain); with many rows the slope can win clearly
(Friedman #1, 10 inputs and 1 500 rows: test MSE 1.39 against 1.69 for the trend, and 1.82
untilted).
"""

import numpy as np

from kernattn._core.blocks import map_query_blocks, single_threaded_blas
from kernattn._core.sums import softmax_weights
from kernattn._local.fits import BlendedLine, LocalPolynomials, TiltedWeights
from kernattn._local.linear_fit import n_line_parameters, sparse_neighborhoods
from kernattn._local.polynomial import equivalent_weights
from kernattn._local.tilt import (
    PENALTIES,
    PENALTY,
    key_spread,
    slope_design,
    tilt_weights,
    trend_direction,
)

#: The search grid of the log of the logits' factor: a coarse grid over [-5, 3] (0 among its
#: points: the kernel as learned), then a fine one around its best point. A fixed grid, not a
#: line search, so that rounding (e.g. integer weights against repeated rows) cannot send the
#: search down another path.
COARSE_GRID = np.linspace(-5.0, 3.0, 17)
FINE_GRID = np.linspace(-0.4, 0.4, 9)
#: Queries (duplicate groups) whose leave-one-out error sets the width for large n.
WIDTH_QUERIES = 2048
#: The same for the tilt (every width it tries is a Newton solve per query); half as many
#: for a tilt along one direction, tried at more widths, and of one parameter per head.
TILT_QUERIES = 1024
DIRECTION_QUERIES = 512
#: The work per query-key pair of a tilted or local-linear leave-one-out estimate, in units
#: of a kernel sum's (a softmax, a few Newton passes or the line's moments): 512 tuning
#: queries against 1 500 keys are worth two threads.
LOCAL_FIT_COST = 4
#: A width at which more than this share of the leave-one-out queries have too few neighbors
#: for a line (and fall back on the kernel average) is not a width for local lines.
MAX_FALLBACK = 0.01


def leave_one_out_lines(
    objective, theta, log_factor, queries, tilt=None, max_fallback=None, keys=None, unreached=None
):
    r"""Leave-one-out local-linear estimates of the head mixture at ``theta`` with every
    head's logits multiplied by ``exp(log_factor)``: shape (len(queries), n_outputs), and
    the mask of the queries for which some head had too few neighbors for a line (they got
    its kernel average). With ``tilt``, a pair ``(kind, penalty)`` (the kind of
    :mod:`kernattn._local.tilt` and its penalty :math:`\varepsilon`), the estimates of the tilted
    weights instead, and the mask of the queries whose weights rest on too few keys to
    balance (in every direction as few as for a line, along one direction two).

    Each query attends to every training row outside its duplicate group (as in the
    leave-one-out loss of :mod:`kernattn.learned._objective`), or to the rows ``keys``
    only (held-out queries against a training part); the line of head ``h`` is fitted in
    its key space.

    With ``tilt``, ``unreached`` (a boolean array of ``len(queries)``, optional) is set
    where some head's tilt could not reach its balance (:func:`kernattn._local.tilt.tilt_weights`).

    With ``tilt`` and ``max_fallback``, the mask is found first (from the kernel weights
    alone): if the queries it holds carry more than that share of the sample weight, the
    estimates (a Newton solve per query) are not computed and ``None`` is returned in
    their place.
    """
    estimates, fell_back = _leave_one_out(
        objective, theta, log_factor, queries, [tilt], max_fallback, keys, unreached
    )
    return (None if estimates is None else estimates[0]), fell_back


def leave_one_out_directions(objective, theta, log_factor, queries, tilts):
    """The leave-one-out estimates of several tilts along one direction (``tilts``, pairs
    ``(kind, penalty)`` of kind ``"slope"`` or ``"trend"``) at one width, from one pass:
    each head's kernel weights are formed once for all of them. A list of arrays of shape
    (len(queries), n_outputs), each equal to :func:`leave_one_out_lines`' for its tilt, and
    the mask of the queries whose weights rest on fewer than two keys (the same for all)."""
    if any(kind not in ("slope", "trend") for kind, _ in tilts):
        raise ValueError(f"tilts along one direction only: 'slope' or 'trend'; got {tilts}")
    return _leave_one_out(objective, theta, log_factor, queries, list(tilts))


def _leave_one_out(
    objective, theta, log_factor, queries, tilts, max_fallback=None, keys=None, unreached=None
):
    """:func:`leave_one_out_lines` for each of ``tilts`` (``None``: the line; one family of
    fallback: the line and the balance alone, several tilts along one direction together),
    from each head's kernel weights formed once: a list of estimates and the mask."""
    layout = objective.layout
    _, _, _, a, b = layout.unpack(theta)
    heads = objective.heads(theta, keys)
    factor = np.exp(log_factor)
    every = slice(None) if keys is None else keys
    Y = objective.Y[every]
    log_sw = objective.log_sw[every]
    groups = objective.groups
    ids = groups.ids[every]
    out = np.empty((len(tilts), len(queries), Y.shape[1]))
    fell_back = np.zeros(len(queries), dtype=bool)
    key_points = [head.Pk[every] for head in heads]
    n_params = [n_line_parameters(P) for P in key_points]
    sw = objective.sw[every]
    precision = sw * objective.weight_unit
    kinds = [None if tilt is None else tilt[0] for tilt in tilts]
    tilted = any(kind is not None for kind in kinds)
    spreads = [key_spread(P, sw) if tilted else None for P in key_points]
    trend = "trend" in kinds
    directions = [trend_direction(P, Y, sw) if trend else None for P in key_points]
    slope = "slope" in kinds
    designs = [slope_design(P, Y) if slope else None for P in key_points]
    if kinds[0] in ("slope", "trend"):
        n_params = [2] * len(key_points)  # a balance along one direction: two keys

    def kernel_weights(rows, head):
        logits = head.queries[rows] @ head.keys.T
        # Only the similarity is scaled; the sample weights' log stays.
        logits -= log_sw
        logits *= factor
        logits += log_sw
        groups.leave_out(logits, rows, keys)
        return softmax_weights(logits)

    def sparse(span):
        # Balancing in d directions needs d + 1 keys with weight, as a line does.
        for h, head in enumerate(heads):
            weights = kernel_weights(queries[span], head)
            fell_back[span] |= sparse_neighborhoods(weights, n_params[h], ids)

    def block(span):
        rows = queries[span]
        estimates = np.zeros((len(tilts), len(rows), Y.shape[1])) + b
        for h, head in enumerate(heads):
            weights = kernel_weights(rows, head)
            if not checked:
                # The line that predicts (LocalPolynomials) is held back toward the kernel
                # average where its local design cannot support it; the width filter counts
                # the queries whose weights rest on too few distinct keys for any line (a
                # held-back line still estimates: at 1 % of the queries, a filter on it
                # left some folds of R's MASS::hills and MASS::cpus no width at all).
                fell_back[span] |= sparse_neighborhoods(weights, n_params[h], ids)
            for t, tilt in enumerate(tilts):
                if tilt is None:
                    lines, _ = equivalent_weights(
                        weights, key_points[h], head.Pk[rows], 1, sample_weight=precision
                    )
                else:
                    lines, missed = tilt_weights(
                        tilt[0],
                        weights,
                        key_points[h],
                        head.Pk[rows],
                        spread=spreads[h],
                        penalty=tilt[1],
                        values=Y,
                        direction=directions[h],
                        design=designs[h],
                    )
                    if unreached is not None:
                        unreached[span] |= missed
                estimates[t] += a[h] * (lines @ Y)
        out[:, span] = estimates
        return None

    # The mask found first is not found again with the estimates. (A tilt along one
    # direction needs two keys: the mask is found with the estimates, from the same weights.)
    checked = kinds == ["balance"] and max_fallback is not None
    if checked:
        map_query_blocks(sparse, len(queries), len(Y), n_jobs=objective.n_jobs, n_arrays=2)
        query_weights = objective.sw[queries]
        if query_weights[fell_back].sum() > max_fallback * query_weights.sum():
            return None, fell_back
    map_query_blocks(
        block,
        len(queries),
        len(Y),
        n_jobs=objective.n_jobs,
        n_arrays=4 if not tilted else 8,
        cost=LOCAL_FIT_COST * len(tilts),
    )
    return list(out), fell_back


#: Losses within this share of the smallest count as tied (they differ by rounding, as on
#: degenerate data): the earlier candidate wins, whatever the units of the targets.
TIE = 1e-9


def _first_best(losses):
    """The index of the first of ``losses`` (any shape, in C order) within ``TIE`` of the
    smallest."""
    losses = np.asarray(losses, dtype=np.float64).ravel()
    best = losses.min()
    if not np.isfinite(best):
        return 0
    return int(np.flatnonzero(losses <= best + TIE * abs(best))[0])


def _tuning_queries(objective, rng, max_queries):
    """The rows whose leave-one-out errors tune a width: every row with a key outside its
    duplicate group, or those of ``max_queries`` random groups."""
    n = len(objective.Z)
    queries = objective.groups.valid_queries(np.arange(n), np.arange(n))
    if objective.groups.n_groups > max_queries:
        chosen = np.zeros(objective.groups.n_groups, dtype=bool)
        chosen[rng.choice(objective.groups.n_groups, max_queries, replace=False)] = True
        queries = queries[chosen[objective.groups.ids[queries]]]
    return queries


def _width_loss(objective, theta, rng, tilt, max_queries=WIDTH_QUERIES):
    """The leave-one-out loss of the local-linear (or, with ``tilt`` = ``(kind, penalty)``,
    tilted) mixture as a function of the log-factor of the logits: ``np.inf`` at widths where more
    than ``MAX_FALLBACK`` of the queries lack the neighbors of a line or a balance."""
    queries = _tuning_queries(objective, rng, max_queries)
    sw = objective.sw[queries]

    def loss(log_factor):
        residual, fell_back = leave_one_out_lines(
            objective, theta, log_factor, queries, tilt, max_fallback=MAX_FALLBACK
        )
        if residual is None or sw[fell_back].sum() > MAX_FALLBACK * sw.sum():
            return np.inf
        residual -= objective.Y[queries]
        return float(sw @ np.einsum("ij,ij->i", residual, residual)) / (
            objective.variance * sw.sum()
        )

    return loss


def _refine(loss, coarse_best):
    """The best point of ``FINE_GRID`` around ``coarse_best`` and its loss (``(0, inf)``
    when no width has a finite loss)."""
    fine = coarse_best + FINE_GRID
    losses = [loss(x) for x in fine]
    i = _first_best(losses)
    if not np.isfinite(losses[i]):
        return 0.0, np.inf  # lines nowhere: the kernel as learned
    return float(fine[i]), float(losses[i])


def tune_width(objective, theta, rng, tilt=None):
    r"""The log of the factor of every head's logits that minimizes the leave-one-out
    squared error of the local-linear mixture, or of the tilted one with ``tilt`` =
    ``(kind, penalty)`` (over ``COARSE_GRID``, then ``FINE_GRID`` around its best point;
    the queries are at most ``WIDTH_QUERIES`` duplicate groups).

    Only widths at which at most ``MAX_FALLBACK`` of the queries lack the neighbors of a
    line (or of a balance) count: a narrow kernel whose estimates are mostly kernel
    averages can have a low leave-one-out error among the training points and still leave
    most new queries without a line.

    Returns the log-factor and the leave-one-out loss (divided by the targets' variance)
    at it.
    """
    loss = _width_loss(objective, theta, rng, tilt)
    with single_threaded_blas():
        coarse = [loss(x) for x in COARSE_GRID]
        return _refine(loss, COARSE_GRID[_first_best(coarse)])


#: The log-factors of the logits a tilt along one direction is tried at: the kernel as
#: learned and six widenings by √2 (a tilt, like a line, wants more neighbours than an
#: average; it never wants fewer).
DIRECTION_WIDTHS = -0.5 * np.log(2.0) * np.arange(7)
#: The penalties of a tilt along the targets' trend; one along each query's local slope
#: keeps :data:`~kernattn._local.tilt.PENALTY` (on R's data sets with one to three inputs a
#: second penalty chosen by leave-one-out lost more to the noise of the choice than it
#: gained; along the trend, with four or more, the larger penalty wins where the trend is
#: weak, as on ``ISLR::Auto``).
TREND_PENALTIES = (1.0 / 16.0, 1.0)


def tune_tilt(objective, theta, rng, kind="balance"):
    """The width (log-factor of the logits) and the penalty of the tilt of ``kind``
    (:data:`~kernattn._local.tilt.KINDS`) of the lowest leave-one-out error of the tilted
    estimate, over the same ``TILT_QUERIES`` queries at most throughout
    (``DIRECTION_QUERIES`` along one direction).

    ``"balance"``: every penalty of :data:`~kernattn._local.tilt.PENALTIES` on ``COARSE_GRID``,
    then ``FINE_GRID`` around the best pair's width at its penalty. Along one direction:
    ``DIRECTION_WIDTHS`` (:func:`_widest_best`), at ``PENALTY`` for the slope and at each of
    ``TREND_PENALTIES`` for the trend."""
    seed = rng.randint(2**31 - 1)
    if kind != "balance":
        return _tune_directions(objective, theta, seed, [kind])[kind]
    losses = {
        penalty: _width_loss(
            objective, theta, np.random.RandomState(seed), (kind, penalty), TILT_QUERIES
        )
        for penalty in PENALTIES
    }
    with single_threaded_blas():
        coarse = np.array([[losses[p](x) for x in COARSE_GRID] for p in PENALTIES])
        i, j = np.unravel_index(_first_best(coarse), coarse.shape)
        log_factor, _ = _refine(losses[PENALTIES[i]], COARSE_GRID[j])
    return log_factor, PENALTIES[i]


def _direction_penalties(kind):
    return (PENALTY,) if kind == "slope" else TREND_PENALTIES


def _tune_directions(objective, theta, seed, kinds):
    """:func:`tune_tilt` of each of ``kinds`` (along one direction), all of their penalties
    tried together on the same ``DIRECTION_QUERIES`` queries (drawn with ``seed``): each
    width is one pass for every tilt still searching (:func:`leave_one_out_directions`),
    with the same losses as a pass per tilt. ``{kind: (log_factor, penalty)}``."""
    queries = _tuning_queries(objective, np.random.RandomState(seed), DIRECTION_QUERIES)
    sw = objective.sw[queries]
    scale = objective.variance * sw.sum()

    def losses(log_factor, tilts):
        estimates, fell_back = leave_one_out_directions(
            objective, theta, log_factor, queries, tilts
        )
        if sw[fell_back].sum() > MAX_FALLBACK * sw.sum():
            return [np.inf] * len(tilts)
        values = []
        for residual in estimates:
            residual -= objective.Y[queries]
            values.append(float(sw @ np.einsum("ij,ij->i", residual, residual)) / scale)
        return values

    tilts = [(kind, penalty) for kind in kinds for penalty in _direction_penalties(kind)]
    with single_threaded_blas():
        tried = _widest_best(losses, DIRECTION_WIDTHS, tilts)
    tuned = {}
    for kind in kinds:
        penalty = min(_direction_penalties(kind), key=lambda p: tried[kind, p][1])
        tuned[kind] = (tried[kind, penalty][0], penalty)
    return tuned


def _widest_best(losses, grid, candidates):
    """For each of ``candidates``, the point of ``grid`` (widths in increasing order) of its
    lowest loss and that loss, its widths tried in turn until its loss has risen twice in a
    row above its best so far (it is unimodal in the width on all but degenerate data);
    ``(0, inf)`` when none is finite. ``losses(x, some_candidates)`` gives their losses at
    ``x``, a list in their order: every candidate still searching at once."""
    state = {candidate: (0, np.inf, 0) for candidate in candidates}  # best, its loss, rises
    searching = list(candidates)
    for j, x in enumerate(grid):
        if not searching:
            break
        still = []
        for candidate, value in zip(searching, losses(x, searching), strict=True):
            best, best_loss, rises = state[candidate]
            if value < best_loss - TIE * abs(best_loss) or not np.isfinite(best_loss):
                state[candidate] = (j, value, 0)
            else:
                state[candidate] = (best, best_loss, rises + 1)
            if state[candidate][2] < 2:
                still.append(candidate)
        searching = still
    return {
        candidate: (float(grid[best]), float(best_loss))
        if np.isfinite(best_loss)
        else (0.0, np.inf)
        for candidate, (best, best_loss, _) in state.items()
    }


def choose_tilt(objective, theta, rng, kinds):
    """The kind of tilt (of ``kinds``, in order of preference), its log-factor and its
    penalty: each kind tuned by :func:`tune_tilt` on the same queries, and the kind of the
    lowest leave-one-out error taken (the earlier one on a tie). Kinds along one direction
    are tuned together (:func:`_tune_directions`).

    The lowest, not one standard error from it: along the trend or the slope (four or more
    features), over the folds of six shuffles of ``bench_attention.py``'s five R data sets
    with four or more inputs, the slope taken only where it won by a standard error gave a
    geometric mean of 0.923 and 0.957 of ``KernelSmoother(bandwidth="loo")``'s error (two
    sets of three shuffles), the lowest 0.904 and 0.954 (``MASS::Boston`` 0.884 → 0.816 and
    0.963 → 0.947, ``datasets::swiss`` 0.937 → 0.914, ``MASS::cpus`` 0.977 → 0.982); on
    four draws of Friedman #1 (1 500 rows) it found the slope in the one draw where the rule
    kept the trend (test MSE 1.743 → 1.399), the other three and four draws of diabetes
    unchanged."""
    seed = rng.randint(2**31 - 1)
    if "balance" in kinds:
        tuned = {
            kind: tune_tilt(objective, theta, np.random.RandomState(seed), kind) for kind in kinds
        }
    else:
        # tune_tilt's own draw from a generator seeded with ``seed``, for every kind.
        inner = np.random.RandomState(seed).randint(2**31 - 1)
        tuned = _tune_directions(objective, theta, inner, list(kinds))
    if len(kinds) == 1:
        return (kinds[0], *tuned[kinds[0]])
    queries = _tuning_queries(objective, np.random.RandomState(seed), DIRECTION_QUERIES)
    errors = np.column_stack(
        [
            held_out_errors(
                objective, theta, queries, None, 0, tuned[kind][0], (kind, tuned[kind][1])
            )
            for kind in kinds
        ]
    )
    ok = np.all(np.isfinite(errors), axis=1)
    if not np.any(ok):
        return (kinds[0], *tuned[kinds[0]])
    kind = kinds[_first_best(objective.sw[queries][ok] @ errors[ok])]
    return (kind, *tuned[kind])


def held_out_estimates(objective, theta, queries, keys=None, degree=0, log_factor=0.0, tilt=None):
    """Estimates of the head mixture at ``theta`` for ``queries`` from the rows ``keys``
    (``None``: leave-one-out against every other row), shape (len(queries), n_outputs).

    ``degree=0`` is the kernel average at the learned width (tilted, with ``tilt`` =
    ``(kind, penalty)``), ``degree=1`` the local line; a tilt's or a line's logits are
    multiplied by ``exp(log_factor)``. Rows without a key outside their duplicate group get
    ``nan``.
    """
    queries = np.asarray(queries)
    if degree == 1 or tilt is not None:
        n = len(objective.Z)
        valid = objective.groups.valid_queries(queries, np.arange(n) if keys is None else keys)
        out = np.full((len(queries), objective.Y.shape[1]), np.nan)
        index = np.flatnonzero(np.isin(queries, valid))
        with single_threaded_blas():
            estimates, _ = leave_one_out_lines(
                objective, theta, log_factor, queries[index], tilt=tilt, keys=keys
            )
        out[index] = estimates
        return out
    _, _, _, a, b = objective.layout.unpack(theta)
    heads = objective.head_estimates(theta, queries, keys)
    return np.einsum("h,iht->it", a, heads) + b


def held_out_errors(objective, theta, queries, keys=None, degree=0, log_factor=0.0, tilt=None):
    """Each query's squared error (summed over the outputs) of :func:`held_out_estimates`
    with the same arguments; ``nan`` where it has no estimate."""
    residual = held_out_estimates(objective, theta, queries, keys, degree, log_factor, tilt)
    residual -= objective.Y[queries]
    return np.einsum("ij,ij->i", residual, residual)


#: Rows (at most) whose leave-one-out tilt measures ``unbalanced_``.
UNBALANCED_ROWS = 512


def unbalanced_share(objective, theta, log_factor, tilt):
    """The share of the training rows (at most ``UNBALANCED_ROWS``, evenly spread) whose
    leave-one-out tilt ``(kind, penalty)`` at ``log_factor`` could not reach its balance
    in some head (``unbalanced_``)."""
    n = len(objective.Z)
    queries = objective.groups.valid_queries(np.arange(n), np.arange(n))
    if not len(queries):
        return 0.0
    queries = queries[np.unique(np.linspace(0, len(queries) - 1, UNBALANCED_ROWS).astype(int))]
    unreached = np.zeros(len(queries), dtype=bool)
    leave_one_out_lines(objective, theta, log_factor, queries, tilt=tilt, unreached=unreached)
    return float(unreached.mean())


def local_lines(kernel, value_columns, values, sample_weight):
    """The local line (a local polynomial of degree 1) of every head of ``kernel``, in its
    key space, held back toward the kernel average where its local design cannot support
    it (``values`` in the units of ``value_columns``)."""
    return [
        LocalPolynomials(kernel.keys(h), value_columns, values, 1, sample_weight=sample_weight)
        for h in range(kernel.n_heads)
    ]


def corrected_kernel(heads, constant, line, share, *, sample_weight, tilt_values, lines):
    """The fitted kernel with its local corrections.

    Parameters
    ----------
    heads : callable
        ``log_factor → SoftmaxHeads``: the heads with every logit multiplied by
        ``exp(log_factor)``.
    constant : tuple or None
        The local constant's ``(log_factor, penalty, kind)`` (penalty ``None``: not
        tilted), or ``None`` for a line alone.
    line : float or None
        The line's log-factor, or ``None`` for no line.
    share : float
        The line's share of a blend.
    sample_weight : ndarray
        The keys' weights.
    tilt_values : ndarray
        The targets in the units the tilt's width was tuned in (the slope's direction
        weighs the outputs as that tuning did).
    lines : tuple
        ``(value_columns, values)``: the targets of the local lines in the engine's units.
    """
    kernel = heads(line if constant is None else constant[0])
    if constant is None:
        return kernel.with_local(local_lines(kernel, *lines, sample_weight))
    tilts = None
    if constant[1] is not None:
        tilts = [
            TiltedWeights(
                kernel.keys(h), sample_weight, constant[1], kind=constant[2], values=tilt_values
            )
            for h in range(kernel.n_heads)
        ]
    if line is not None:
        # Each head's line on a copy of the head at the line's own width.
        blend = heads(line)
        blend = blend.with_local(local_lines(blend, *lines, sample_weight))
        return kernel.with_local(
            [
                BlendedLine(blend.select([h]), share, None if tilts is None else tilts[h])
                for h in range(kernel.n_heads)
            ]
        )
    return kernel if tilts is None else kernel.with_local(tilts)
