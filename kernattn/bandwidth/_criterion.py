r"""The bandwidth-selection criteria of the smoother (leave-one-out, AICc, GCV) as functions
of the log-bandwidths, with their analytic gradients.

The criterion's sums over the keys go through the one reduction
(:func:`kernattn._core.sums.kernel_sums`): key tiles on a running shift, each row's own input
left out; blocks of whole rows of weights (the other profiles, a local polynomial, a grid of
bandwidths) are exponentiated by its guards (:func:`~kernattn._core.sums.shifted_exp`,
:func:`~kernattn._core.sums.exp_bounded`), and sums over parts of the keys merge at their
shifts (:func:`~kernattn._core.sums.merge`). The local polynomial's own mathematics is
:mod:`kernattn._local.polynomial`'s, and its blocks of the criterion (the fit about each
query's point, the analytic gradient, the held-back rows' differences) are
:mod:`kernattn.bandwidth._polynomial_blocks`'s; :class:`Criterion` holds the training set,
the local constant's blocks and the bookkeeping.
"""

import numpy as np

from kernattn._core.blocks import (
    KEY_TILE,
    iter_query_blocks,
    map_query_blocks,
    n_workers,
    single_threaded_blas,
)
from kernattn._core.loo import DuplicateGroups
from kernattn._core.numerics import (
    has_spread,
    normalized_weights,
    power_of_two_scale,
    weighted_mean,
)
from kernattn._core.rows import as_part
from kernattn._core.sums import (
    augment_keys,
    augment_queries,
    exp_bounded,
    exp_shifted,
    gaussian_key_bias,
    kernel_sums,
    merge,
    shifted_exp,
)
from kernattn._local.linear_fit import value_key_columns
from kernattn._local.polynomial import (
    polynomial_columns,
)
from kernattn.bandwidth._polynomial_blocks import (
    BLOCK_ENTRIES,
    PolynomialBlocks,
    expanded_squares,
)
from kernattn.bandwidth._rules import weighted_spread
from kernattn.kernels import log_kernel, log_kernel_derivative

# Unshifted kernel sums of a row below this are redone with the row's maximum logit
# subtracted: above it, the floor of the logits (EXP_FLOOR) is far below every digit.
_UNSHIFTED_SUM = 1e-250
# The sums go unshifted only while ½‖k‖²/c² stays below this: the rounding of the logits'
# expansion (about 1e-16 of it) then moves no logit by more than 1e-6.
_ROUNDING_SAFE = 1e10
# A criterion where tr(S) leaves no degrees of freedom for the error: worse than any other.
_INFEASIBLE = 1e10

#: The selection criteria: name → what the search minimizes.
CRITERIA = ("loo", "aic", "gcv")


def constant_gradient_terms(Q, sums, residual, ybar):
    r"""The per-query terms of the local-constant gradient from the column sums.

    With u = q − k, kernel values E and Γ = −2f'(r²), ``sums`` holds per query
    :math:`\sum_j E Γ [1, y_j, k_j, k_j^2, y_j k_j, y_j k_j^2]` (outputs major in the last
    two). :math:`\sum_j E Γ u_f^2` and :math:`\sum_j E Γ y_{jo} u_f^2` expand in
    :math:`q_f^2`, :math:`-2 q_f` and these sums. Returns ``inner`` (b, d),
    :math:`\sum_j E Γ (r \cdot y_j - r \cdot \bar y) u_f^2` for the residuals ``r``, and
    ``plain_u2`` (b, d), :math:`\sum_j E Γ u_f^2`.
    """
    b, d = Q.shape
    t = residual.shape[1]
    base = 1 + t
    start = base + 2 * d
    plain_u2 = expanded_squares(
        Q, sums[:, :1], sums[:, base : base + d], sums[:, base + d : start]
    )
    valued_u2 = expanded_squares(
        Q[:, None, :],
        sums[:, 1 : 1 + t, None],
        sums[:, start : start + t * d].reshape(b, t, d),
        sums[:, start + t * d : start + 2 * t * d].reshape(b, t, d),
    )
    inner = np.einsum("bt,btf->bf", residual, valued_u2)
    inner -= np.einsum("bt,bt->b", residual, ybar)[:, None] * plain_u2
    return inner, plain_u2


def constant_gradient(Q, sums, residual, ybar, row_share, self_share, factor):
    r"""The local-constant gradients of :math:`\sum_i s_i \|r_i\|^2` and of the trace from
    the sums of one product (:func:`constant_gradient_terms`); ``row_share`` is
    :math:`s_i / S_{0,i}`, ``self_share`` :math:`w_{ii} / S_{0,i}` (``None`` for
    ``"loo"``: no trace).

    With Γ = −2f'(r²) (1 for the Gaussian kernel, already in ``sums``) and u = q − k,
    Σ_j E_ij Γ_ij (r_i·y_j − r_i·ȳ_i) u_ijf² expands in q_f² Σ_j E Γ [1, y],
    −2q_f Σ_j E Γ [k_f, y k_f] and Σ_j E Γ [k_f², y k_f²]: sums of the columns, so the
    gradient costs no pass over the block beyond the product that gives the estimate (for
    the Gaussian kernel, the same product); ∂S_ii/∂θ = −w_ii Σ_j w_ij Γ_ij u_ij².
    """
    inner, plain_u2 = constant_gradient_terms(Q, sums, residual, ybar)
    d_rss = -2.0 * (row_share @ inner) / factor**2
    if self_share is None:
        return d_rss, np.zeros(Q.shape[1])
    return d_rss, -(self_share @ plain_u2) / factor**2


#: The observations below which a criterion's penalty has no room at any bandwidth: AICc
#: needs n > tr S + 2 and GCV n > tr S, where tr S ≥ 1 (the constant's degree of freedom).
_LEAST_OBSERVATIONS = {"aic": 3.0, "gcv": 1.0}


def check_observations(criterion, n_observations):
    """Refuse a penalized criterion whose sample weights count too few observations.

    ``"aic"`` and ``"gcv"`` count the weights as observations (an integer weight is that
    many rows), so weights that sum to 3 or less leave their penalty no room at any
    bandwidth; ``"loo"`` does not depend on the weights' scale.

    Examples
    --------
    >>> check_observations("aic", 2.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: bandwidth='aic' counts the sample weights as observations ...
    """
    least = _LEAST_OBSERVATIONS.get(criterion)
    if least is not None and not n_observations > least:
        raise ValueError(
            f"bandwidth={criterion!r} counts the sample weights as observations (an integer "
            f"weight is that many rows): they sum to {n_observations:.3g}, and its penalty "
            f"needs more than {least:g}. Their scale is a count: rescale them, or use "
            "bandwidth='loo', which does not depend on it."
        )


def criterion_value(criterion, rss, trace, total, n_total, d_rss=None, d_trace=None):
    """A criterion (search units) and its gradient from the weighted squared error ``rss``
    over the weight ``total``, and the trace of the smoother matrix over ``n_total`` rows
    (see :class:`Criterion`)."""
    sigma2 = rss / total
    d_sigma2 = None if d_rss is None else d_rss / total
    if criterion == "loo":
        return sigma2, d_sigma2
    n = n_total
    tau = trace / n
    room = 1.0 - tau if criterion == "gcv" else 1.0 - tau - 2.0 / n
    if not room > 0:
        return _INFEASIBLE, None if d_rss is None else np.zeros_like(d_rss)
    if criterion == "gcv":
        value = sigma2 / room**2
        if d_rss is None:
            return value, None
        return value, d_sigma2 / room**2 + 2.0 * sigma2 * (d_trace / n) / room**3
    sigma2 = max(sigma2, 1e-300)
    value = np.log(sigma2) + (1.0 + tau) / room
    if d_rss is None:
        return value, None
    return value, d_sigma2 / sigma2 + (2.0 - 2.0 / n) / room**2 * (d_trace / n)


def target_unit(sigma):
    """A power of two near the total standard deviation of the targets (the root of the
    summed variances ``sigma²`` of the outputs; 1 without spread)."""
    top = float(sigma.max(initial=0.0))
    total = top * float(np.sqrt(np.sum((sigma / top) ** 2))) if top > 0 else 1.0
    return float(power_of_two_scale(total))


def criterion_columns(K, Y, gradient=True):
    """What the kernel weights of the local-constant criterion are summed against,
    transposed (columns × keys): ``[1, y]``, then for its gradient ``[k, k², y k, y k²]``
    (the gradient's sums, from the same product)."""
    columns = [np.ones((len(K), 1)), Y]
    if gradient:
        columns += [K, K**2, value_key_columns(Y, K), value_key_columns(Y, K**2)]
    return np.ascontiguousarray(np.hstack(columns).T)


def gaussian_sums(Q, K_aug, log_sw, columns, factor, left_out=None, key_radius=None):
    r"""``(c, Σ)``: the Gaussian kernel sums :math:`\sum_j e^{\ell_j - c}\, C_j` of queries
    ``Q`` against keys, :math:`\ell_j = -\tfrac12\|q - k_j\|^2/f^2 + \log s_j`, by the one
    reduction (:func:`kernattn._core.sums.kernel_sums`), tiles of keys that stay in cache.

    ``K_aug`` holds the augmented keys (:func:`~kernattn._core.sums.augment_keys` with the
    Gaussian key bias, no weights), ``log_sw`` the keys' log-weights (``None``: all equal),
    ``columns`` what is summed (columns × keys), ``factor`` :math:`f`, ``left_out`` the
    (row, key) pairs that weigh nothing. The logits are at most 0 (up to the rounding of
    the product), so they are first used as they are (:math:`c = 0`): two passes over each
    tile fewer than shifting them. The rows whose sums come out below ``_UNSHIFTED_SUM``
    (the nearest kept key far away) are redone on the running row maximum, so that no row
    underflows; so is every row when the rounding of the product could make a logit large
    (``key_radius``, the keys' largest norm, tells). Sums of several sets of keys merge at
    their shifts (:func:`kernattn._core.sums.merge`).
    """
    Q_aug = augment_queries(Q)
    Q_aug *= 1.0 / factor**2

    def logits(keys, out):
        block = np.matmul(Q_aug, K_aug[keys].T, out=out)
        if log_sw is not None:
            block += log_sw[keys]
        return block

    def column_sums(weights, keys):
        return weights @ columns[:, keys].T

    radius = key_radius if key_radius is not None else _largest_norm(K_aug)
    shift = not 0.5 * (radius / factor) ** 2 < _ROUNDING_SAFE
    top, sums = kernel_sums(logits, len(K_aug), column_sums, shift=shift, left_out=left_out)
    if shift:
        return top, sums
    redo = np.flatnonzero(~((sums[:, 0] >= _UNSHIFTED_SUM) & (sums[:, 0] < np.inf)))
    if len(redo):
        if left_out is not None:
            rows, keys = left_out
            inside = np.isin(rows, redo)
            left_out = (np.searchsorted(redo, rows[inside]), keys[inside])
        top[redo], sums[redo] = gaussian_sums(
            Q[redo], K_aug, log_sw, columns, factor, left_out, key_radius=np.inf
        )
    return top, sums


def _largest_norm(K_aug):
    """The largest norm of the keys from their augmented form (−½‖k‖² is a column)."""
    return float(np.sqrt(-2.0 * K_aug[:, -1].min(initial=0.0)))


class LeftOutPairs:
    """The (query, key) pairs a leave-one-out criterion leaves out: each training row with
    itself and every row of identical input (``groups``, a
    :class:`~kernattn._core.loo.DuplicateGroups` of ``n`` rows)."""

    def __init__(self, groups, n):
        self.groups = groups
        self.ids = groups.ids if groups.n_groups < n else None
        if self.ids is not None:
            sizes = np.bincount(self.ids)
            self.has_copies = sizes[self.ids] > 1
            order = np.argsort(self.ids, kind="stable")
            bounds = np.searchsorted(self.ids[order], np.arange(groups.n_groups + 1))
            self.members = [order[bounds[g] : bounds[g + 1]] for g in range(groups.n_groups)]

    def pairs(self, index):
        """(block row, key) pairs of the queries ``index``: each with itself and every copy
        of its input."""
        block_rows = [np.arange(len(index))]
        keys = [index]
        if self.ids is not None:
            for i in np.flatnonzero(self.has_copies[index]):
                members = self.members[self.ids[index[i]]]
                block_rows.append(np.full(len(members), i))
                keys.append(members)
        return np.concatenate(block_rows), np.concatenate(keys)

    def mark(self, r2, rows):
        """+inf where query ``rows[i]`` and a key share an input (itself, its copies)."""
        if isinstance(rows, slice):
            return self.groups.leave_out(r2, rows, value=np.inf)
        r2[np.arange(len(rows)), rows] = np.inf
        if self.ids is not None:
            # Only the rows with copies need a look at their group (most have none).
            for i in np.flatnonzero(self.has_copies[rows]):
                r2[i, self.members[self.ids[rows[i]]]] = np.inf
        return r2


class Criterion(PolynomialBlocks):
    r"""A bandwidth-selection criterion of the smoother as a function of the log-bandwidths.

    ``"loo"``: the leave-one-out squared error :math:`\sum_i s_i \|y_i - \hat y_{-i}\|^2 /
    \sum_i s_i`, where :math:`\hat y_{-i}` is the estimate (local constant or local linear)
    at :math:`x_i` from the training set without row :math:`i` and every exact duplicate of
    it. For a linear smoother this is :math:`(y_i - \hat y_i)/(1 - S_{ii})` with
    :math:`S` the smoother matrix at the training points (exactly so for the local-linear
    fit without its ridge); computing the fit without the row is the same and does not
    cancel as :math:`S_{ii} \to 1`.

    ``"gcv"``: :math:`\hat\sigma^2 / (1 - \mathrm{tr}(S)/n)^2` (that is
    :math:`n\,\mathrm{RSS}/(n - \mathrm{tr}\,S)^2`), and ``"aic"``: the corrected AIC of
    Hurvich, Simonoff and Tsai (1998),
    :math:`\log\hat\sigma^2 + (1 + \mathrm{tr}(S)/n)/(1 - (\mathrm{tr}(S) + 2)/n)`, with
    :math:`\hat\sigma^2 = \sum_i s_i \|y_i - \hat y_i\|^2 / n` the in-sample error and
    :math:`n = \sum_i s_i` (integer weights count as repeated rows).

    The gradients with respect to :math:`\theta_f = \log h_f` are analytic. With
    :math:`\gamma_{ijf} = \partial \log\kappa_{ij}/\partial\theta_f = -2 f'(r_{ij}^2)
    u_{ijf}^2` (:math:`u^2_{ijf}` for the Gaussian kernel), the local fit's
    :math:`\partial\hat y_i/\partial\theta_f = \sum_j l_{ij}\,\gamma_{ijf}\, e_{ij}`, where
    :math:`l_{ij}` are the equivalent weights and :math:`e_{ij} = y_j - \hat m_i(x_j)` the
    residual of key :math:`j` from query :math:`i`'s local fit (for the local-constant fit,
    :math:`y_j - \hat y_i`); and :math:`\partial S_{ii}/\partial\theta_f = -w_{ii}
    \sum_j w_{ij} a_{ij}^2 \gamma_{ijf}` with :math:`l_{ij} = w_{ij} a_{ij}`.

    The targets are centered and divided by their total standard deviation, so the search
    sees the same function for ``Y`` and ``c·Y`` (up to rounding): the selected bandwidth
    does not depend on the units of the targets; the inputs are centered and the search
    runs in log-bandwidths, so it does not depend on the units of the inputs either. The
    ``scaled_`` methods give the criterion in those units; :meth:`in_target_units` converts.

    The local line can live in a subset of the columns (``line``): with discrete features
    (encoded columns, :mod:`kernattn.bandwidth._mixed`) it is fitted in the continuous features
    only,
    and the discrete ones enter through the kernel weights (Li and Racine, 2004). The
    gradient formula holds as it is: the local fit depends on the bandwidths only through
    its weights.

    Every evaluation can be restricted to a subset of the queries (``rows``): each query
    is still compared with every key, and the sums over the subset are scaled to the whole
    training set, so the criterion's ingredients (the squared error, the trace) and their
    gradients are unbiased estimates.
    """

    def __init__(
        self,
        X,
        Y,
        sample_weight,
        kernel,
        degree=0,
        criterion="loo",
        n_jobs=None,
        leave_out_duplicates=True,
        line=None,
    ):
        self._set_settings(kernel, degree, criterion, n_jobs)
        raw = np.asarray(sample_weight, dtype=float)
        # The precision weights of a local polynomial's variance rule (see
        # kernattn._local.polynomial): the squared weights' sums are divided by them.
        self.precision = raw if np.any(raw != 1.0) else None
        sample_weight = normalized_weights(raw)
        with np.errstate(over="ignore"):
            self.n_total = float(raw.sum())
        self.X = X - weighted_mean(X, sample_weight)
        # Centered, and divided by a power of two near the total standard deviation of the
        # targets (the root of the summed variances of the outputs): the loss of predicting
        # the mean is between 1 and 4 whatever the units, so the optimizer's absolute
        # tolerances mean the same for y and c·y. A power of two is exact: weighted and
        # repeated rows, whose spreads differ in their last bits, see the same targets.
        self.y_scale = target_unit(weighted_spread(Y, sample_weight)[1])
        Y = Y - weighted_mean(Y, sample_weight)
        self.Y = Y / self.y_scale
        self.sw = sample_weight
        log_sw = np.log(sample_weight / sample_weight.max())
        self.log_sw = log_sw if np.any(log_sw != 0) else None
        self.total = sample_weight.sum()
        self.n = len(X)
        # The (query, key) pairs to leave out: each row with every row of identical input.
        # Without leave_out_duplicates only the row itself (rows that share a category are
        # neighbours there, not copies).
        self.groups = DuplicateGroups(X if leave_out_duplicates else np.arange(len(X))[:, None])
        self.n_groups = self.groups.n_groups
        self.left_out = LeftOutPairs(self.groups, self.n)
        # The columns of the local line (all of them, or the continuous features' with
        # discrete ones, whose levels enter through the kernel only).
        self.line = np.arange(X.shape[1]) if line is None else np.asarray(line, dtype=int)
        self._parts = None

    def _set_settings(self, kernel, degree, criterion, n_jobs):
        """The settings of the search, in memory or on parts."""
        self.profile = kernel
        self.degree = degree
        self.criterion = criterion
        self.loo = criterion == "loo"
        self.n_jobs = n_jobs
        # The local-constant Gaussian criterion needs only sums over the keys: it goes
        # through the keys in tiles (see _tiled_sums); the others need whole rows.
        self.tiled = degree == 0 and kernel == "gaussian"

    @classmethod
    def on_parts(cls, rows, summary, n_jobs=None):
        """The leave-one-out criterion of the Gaussian local-constant smoother whose keys
        are training rows in parts (:class:`~kernattn._core.rows.Rows`) and whose queries are the
        uniform sample of their first pass (:class:`~kernattn._engine.summary.RowSummary`).

        The parts are prepared once, where they are (centered, the values in the search's
        units, the (query, key) pairs with identical inputs to leave out); every evaluation
        takes each part's kernel sums of the first queries (:func:`part_sums`), merges them
        at their shifts and finishes as in memory: the criterion is the in-memory one on the
        same queries up to the order of the additions. :meth:`release` lets the prepared
        parts go.
        """
        d = len(summary.x_mean)
        sigma_x = np.sqrt(summary.x_m2 / summary.total)
        constant = ~has_spread(sigma_x, summary.max_abs)
        if np.all(constant):
            raise ValueError(
                "bandwidth='loo' needs at least 2 distinct training inputs; every row of X "
                "is the same. Give a bandwidth or use 'scott'."
            )
        self = cls.__new__(cls)
        self._set_settings("gaussian", 0, "loo", n_jobs)
        self.precision = None
        self.n = int(summary.count)
        self.n_total = float(summary.total)
        # Scott's rule (a constant feature gets 1), as rule_of_thumb_bandwidth.
        self.scott = np.where(constant, 1.0, sigma_x * summary.total ** (-1.0 / (d + 4)))
        # The targets in the search's units, as in memory: centered, divided by a power of
        # two near their total standard deviation.
        self.y_scale = target_unit(np.sqrt(summary.y_m2 / summary.total))
        weight_unit = float(power_of_two_scale(summary.max_weight))
        self.total = summary.total / weight_unit
        _, _, X_q, Y_q, w_q = summary.sample
        self.X = X_q - summary.x_mean
        self.Y = (Y_q - summary.y_mean) / self.y_scale
        self.sw = w_q / weight_unit
        self.log_sw = np.log(w_q / summary.max_weight)
        self.line = np.arange(d)
        self._parts = rows.prepare(
            prepare_part,
            summary.x_mean,
            summary.y_mean,
            self.y_scale,
            summary.max_weight,
            X_q,
        )
        return self

    def release(self):
        """Let the prepared parts go (a cluster drops what it kept for the search)."""
        if self._parts is not None:
            self._parts.release()

    # ------------------------------------------------------------------ units

    def in_target_units(self, value):
        """A criterion value of the search in the targets' units (``inf`` only where the
        true value overflows)."""
        if self.criterion == "aic":
            return value + 2.0 * np.log(self.y_scale)
        with np.errstate(over="ignore", under="ignore"):
            return value * self.y_scale * self.y_scale

    def loss_and_grad(self, log_bandwidth, rows=None):
        """The criterion and its gradient at ``exp(log_bandwidth)``, in the targets'
        units."""
        value, grad = self.scaled_loss_and_grad(log_bandwidth, rows)
        if self.criterion == "aic":
            return self.in_target_units(value), grad
        return self.in_target_units(value), self.in_target_units(grad)

    def grid_losses(self, bandwidth, factors, rows=None):
        """The criterion at ``bandwidth * c`` for every common factor ``c`` (targets'
        units)."""
        return self.in_target_units(self.scaled_grid_losses(bandwidth, factors, rows))

    # ------------------------------------------------------------- the blocks

    def _columns(self, K, gradient=True):
        """What the kernel weights are summed against, transposed (columns × keys): for
        the local constant :func:`criterion_columns`; for a local polynomial in the keys'
        columns ``line`` the columns of
        :func:`~kernattn._local.polynomial.polynomial_columns` (the value moments
        ``[y, y², 1]``, the keys' monomials up to twice the degree, the values times the
        monomials up to the degree), whose ``[1, monomials]`` are also summed with the
        squared weights."""
        if not self.degree:
            return criterion_columns(K, self.Y, gradient)
        moments = np.hstack([self.Y, self.Y**2, np.ones((self.n, 1))])
        with np.errstate(over="ignore", invalid="ignore"):
            columns = polynomial_columns(moments, self.Y, K[:, self.line], self.degree)
        return np.ascontiguousarray(columns.T)

    def _map_blocks(self, function, rows, tiled=None):
        """``function(rows)`` over query blocks (global row indices: a slice when ``rows``
        is ``None``), on threads; the results in block order. ``tiled``: blocks sized for
        tiles of keys (default: as the criterion's sums go), else for whole rows."""
        n_queries = self.n if rows is None else len(rows)
        tiled = self.tiled if tiled is None else tiled

        def run(block):
            return function(block if rows is None else rows[block])

        if tiled:
            options = dict(key_tile=KEY_TILE, n_arrays=2)
            width = min(self.n, KEY_TILE)
        else:
            options = dict(n_arrays=6, cache=BLOCK_ENTRIES)
            width = self.n
        if n_workers(n_queries, self.n, self.n_jobs) == 1:
            # One thread (the search already holds BLAS to one): the blocks in a loop,
            # without entering the thread limits again for every evaluation.
            blocks = iter_query_blocks(
                n_queries, width, **{k: v for k, v in options.items() if k != "key_tile"}
            )
            return [run(block) for block in blocks]
        return map_query_blocks(run, n_queries, self.n, n_jobs=self.n_jobs, **options)

    def _distances(self, K, K_aug, rows):
        """Scaled squared distances of a block (rows × all keys), with the row minimum
        subtracted for the Gaussian kernel (the shift of its logits); +inf on the left-out pairs
        for ``"loo"``.

        One product of the augmented queries and keys (:mod:`kernattn._core.sums`):
        ``‖q − k‖² = −2 [q, −½‖q‖², 1]·[k, 1, −½‖k‖²]``. Not clipped at 0: a rounding error
        of −1e-16 only shifts a logit by as much.
        """
        r2 = augment_queries(K[rows]) @ K_aug.T
        r2 *= -2.0
        return self._shifted(r2, rows)

    def _shifted(self, r2, rows):
        """Squared distances of the queries ``rows`` as the kernel takes them: +inf on the
        left-out pairs for ``"loo"``, then the row minimum subtracted for the Gaussian
        kernel (the shift of its logits), clipped at 0 for the others."""
        if self.loo:
            r2 = self.left_out.mark(r2, rows)
        if self.profile == "gaussian":
            r2 -= r2.min(axis=1, keepdims=True)
        else:
            np.maximum(r2, 0.0, out=r2)
        return r2

    def _largest_r2(self, r2):
        """The largest finite entry of a block of distances (+inf marks left-out pairs)."""
        top = r2.max(axis=1)
        if np.all(np.isfinite(top)):
            return float(top.max(initial=0.0))
        return float(np.where(np.isfinite(r2), r2, 0.0).max(initial=0.0))

    def _tiled_sums(self, K, K_aug, columns, rows, factor):
        """Gaussian kernel sums of a block (:func:`gaussian_sums`) and each row's own
        kernel value on the same shift (its logit is log s_i), for the trace."""
        index = np.arange(self.n)[rows]
        left_out = self.left_out.pairs(index) if self.loo else None
        top, sums = gaussian_sums(
            K[rows], K_aug, self.log_sw, columns, factor, left_out, self._key_radius(K)
        )
        return sums, None if self.loo else self._own_kernel(index, top)

    def _own_kernel(self, rows, top):
        """Each query's own kernel value (its logit is log s_i) on the shift ``top``."""
        log_self = np.zeros(len(top)) if self.log_sw is None else self.log_sw[rows]
        return exp_shifted(log_self - top)

    def _key_radius(self, K):
        return float(np.sqrt(np.einsum("ij,ij->i", K, K).max(initial=0.0)))

    def _kernel(self, r2, factor=1.0):
        """Kernel weights (times the sample weights) of a block, each row scaled by a
        constant (it cancels), and the rows that no key reaches (compact kernels), which
        get their nearest keys, as in prediction."""
        if self.profile == "gaussian":
            logits = np.multiply(r2, -0.5 / factor**2)
            if self.log_sw is None:
                # The row minimum is subtracted: logits ≤ 0 with a 0 in every row.
                lowest = -(0.5 * self._largest_r2(r2) / factor**2)
                return exp_bounded(logits, lowest), np.zeros(len(r2), dtype=bool)
        else:
            logits = log_kernel(r2 / factor**2, self.profile)
        if self.log_sw is not None:
            logits += self.log_sw
        with np.errstate(invalid="ignore"):
            E = shifted_exp(logits)
        empty = ~(E.sum(axis=1) > 0)
        if np.any(empty):
            nearest = r2[empty] == r2[empty].min(axis=1, keepdims=True)
            E[empty] = nearest * (self.sw / self.sw.max())
        return E, empty

    def _weights(self, K, K_aug, rows, factor, r2=None, weights=None):
        """A block's distances, kernel weights and the rows that no key reaches (``r2``,
        ``weights``: the distances, the Gaussian kernel at ``factor``, when known)."""
        if r2 is None:
            r2 = self._distances(K, K_aug, rows)
        if weights is None:
            return r2, *self._kernel(r2, factor)
        return r2, weights, np.zeros(len(r2), dtype=bool)

    def _log_kernel_slope(self, r2, factor):
        """Γ = −2 f'(r²/c²) of the profile on a block of distances (0 on left-out pairs)."""
        finite = np.where(np.isfinite(r2), r2 / factor**2, 0.0)
        return -2.0 * log_kernel_derivative(finite, self.profile)

    def _block(
        self,
        K,
        K_aug,
        columns,
        rows,
        factor=1.0,
        gradient=True,
        r2=None,
        powers=None,
        weights=None,
        shifted_sums=None,
    ):
        """Per block: Σ s_i‖r_i‖², Σ_i S_ii (not for ``"loo"``), and their gradients
        (``r2``: the block's distances, when they are shared by several factors;
        ``powers``: ``[1, k, k²]`` of the keys; ``weights``: the Gaussian kernel of ``r2``
        at ``factor``, when it is known; ``shifted_sums``: the block's ``(c, Σ)`` over the
        keys, taken elsewhere)."""
        if self.degree:
            return self._polynomial_block(
                K, K_aug, columns, rows, factor, gradient, r2, powers, weights
            )
        t = self.Y.shape[1]
        if shifted_sums is not None:
            top, sums = shifted_sums
            E_self = None if self.loo else self._own_kernel(rows, top)
            E, empty = None, np.zeros(len(sums), dtype=bool)
        elif self.tiled and r2 is None:
            sums, E_self = self._tiled_sums(K, K_aug, columns, rows, factor)
            E, empty = None, np.zeros(len(sums), dtype=bool)
        else:
            r2, E, empty = self._weights(K, K_aug, rows, factor, r2, weights)
            # (Cᵀ Eᵀ)ᵀ: BLAS is faster with the long dimension inside.
            sums = np.dot(columns, E.T).T
            E_self = None if self.loo else E[np.arange(len(E)), np.arange(self.n)[rows]]
        S0 = sums[:, 0]
        ybar = sums[:, 1 : 1 + t] / S0[:, None]
        residual, rss = self._residuals(rows, ybar)
        trace = 0.0
        self_weight = None
        if not self.loo:
            self_weight = E_self / S0
            trace = self_weight.sum()
        if not gradient:
            return rss, trace
        # A row that no key reaches has its nearest keys, which no bandwidth moves.
        S0 = np.where(empty, np.inf, S0)
        if self.profile != "gaussian":
            sums = np.dot(columns, (E * self._log_kernel_slope(r2, factor)).T).T
        self_share = None if self.loo else self_weight / S0
        d_rss, d_trace = constant_gradient(
            K[rows], sums, residual, ybar, self.sw[rows] / S0, self_share, factor
        )
        return rss, trace, d_rss, d_trace

    def _residuals(self, rows, estimate):
        """The residuals of the query ``rows`` from their ``estimate`` and their weighted
        sum of squares, Σ s_i‖r_i‖²."""
        residual = self.Y[rows] - estimate
        return residual, self.sw[rows] @ np.einsum("ij,ij->i", residual, residual)

    # -------------------------------------------------------------- criteria

    def _statistics(self, log_bandwidth, rows, gradient=True, factors=None):
        if self._parts is not None:
            return self._part_statistics(log_bandwidth, rows, gradient, factors)
        K = self.X / np.exp(log_bandwidth)
        K_aug = augment_keys(K, gaussian_key_bias(K))
        columns = self._columns(K, gradient and factors is None)
        to_whole = 1.0 if rows is None else self.n / len(rows)
        rows = self._anchor_order(K, rows)
        if factors is None:
            powers = np.hstack([np.ones((self.n, 1)), K, K**2]) if self.degree else None

            def block_statistics(block):
                return self._block(
                    K,
                    K_aug,
                    columns,
                    block,
                    gradient=gradient,
                    powers=powers,
                )

            parts = self._map_blocks(block_statistics, rows)
            return [to_whole * np.sum([p[k] for p in parts], axis=0) for k in range(len(parts[0]))]

        squaring = self.profile == "gaussian" and self.log_sw is None

        def block_grid(block):
            if self.tiled and not squaring:
                return [self._block(K, K_aug, columns, block, c, gradient=False) for c in factors]
            r2 = self._distances(K, K_aug, block)
            if not squaring:
                return [
                    self._block(K, K_aug, columns, block, c, gradient=False, r2=r2)
                    for c in factors
                ]
            # exp(−r²/(2c²)) for the largest factor, then each factor half the one before
            # by squaring twice, (e^{−a})⁴ = e^{−4a}: two products instead of an exp.
            # (The row minimum is subtracted from r², so every row keeps a weight of 1.)
            results = [None] * len(factors)
            E, previous = None, None
            for k in np.argsort(factors)[::-1]:
                c = factors[k]
                if previous == 2.0 * c:
                    np.square(E, out=E)
                    np.square(E, out=E)
                else:
                    E = self._kernel(r2, c)[0]
                previous = c
                results[k] = self._block(
                    K, K_aug, columns, block, c, gradient=False, r2=r2, weights=E
                )
            return results

        parts = self._map_blocks(block_grid, rows, tiled=self.tiled and not squaring)
        return [
            [to_whole * sum(p[c][k] for p in parts) for k in range(2)] for c in range(len(factors))
        ]

    def _part_statistics(self, log_bandwidth, rows, gradient, factors):
        """:meth:`_statistics` with the keys in parts: every part's kernel sums of the
        queries ``rows`` (a prefix of the sample) merged at their shifts, then the same
        block statistics."""
        rows = np.arange(len(self.X)) if rows is None else np.asarray(rows)
        if not np.array_equal(rows, np.arange(len(rows))):
            raise ValueError(
                "a criterion with its keys in parts evaluates a prefix of its queries"
            )
        grid = factors is not None
        factor_list = tuple(float(c) for c in factors) if grid else (1.0,)
        merged = self._parts.reduce(
            part_sums,
            merge_part_sums,
            np.asarray(log_bandwidth, dtype=float),
            len(rows),
            factor_list,
            gradient and not grid,
            self.loo,
        )
        K = self.X[: len(rows)] / np.exp(log_bandwidth)
        to_whole = self.n / len(rows)
        results = [
            self._block(K, None, None, rows, c, gradient=gradient and not grid, shifted_sums=part)
            for c, part in zip(factor_list, merged, strict=True)
        ]
        if grid:
            return [[to_whole * r[k] for k in range(2)] for r in results]
        return [to_whole * np.asarray(value) for value in results[0]]

    def _value(self, rss, trace, d_rss=None, d_trace=None):
        """The criterion (search units) from the squared error and the trace."""
        kind = "loo" if self.loo else self.criterion
        return criterion_value(kind, rss, trace, self.total, self.n_total, d_rss, d_trace)

    def scaled_loss_and_grad(self, log_bandwidth, rows=None):
        """The criterion and its gradient at ``exp(log_bandwidth)`` (search units)."""
        rss, trace, d_rss, d_trace = self._statistics(log_bandwidth, rows)
        return self._value(rss, trace, d_rss, d_trace)

    def scaled_loss(self, log_bandwidth, rows=None):
        rss, trace = self._statistics(log_bandwidth, rows, gradient=False)
        return self._value(rss, trace)[0]

    def scaled_grid_losses(self, bandwidth, factors, rows=None):
        """The criterion at ``bandwidth * c`` for every common factor ``c``, sharing the
        distances (search units)."""
        stats = self._statistics(np.log(bandwidth), rows, gradient=False, factors=factors)
        return np.array([self._value(rss, trace)[0] for rss, trace in stats])

    def effective_dof(self, log_bandwidth, rows=None):
        """tr(S), the trace of the smoother matrix at the training points."""
        loo, self.loo = self.loo, False
        try:
            return float(self._statistics(log_bandwidth, rows, gradient=False)[1])
        finally:
            self.loo = loo

    def effective_dof_and_grad(self, log_bandwidth, rows=None):
        """tr(S) and its gradient in the log-bandwidths (the in-sample pass of AICc and
        GCV, whatever the criterion)."""
        loo, self.loo = self.loo, False
        try:
            _, trace, _, d_trace = self._statistics(log_bandwidth, rows)
            return float(trace), np.asarray(d_trace, dtype=float)
        finally:
            self.loo = loo


def prepare_part(X, y, w, part, center, y_offset, y_scale, max_weight, queries):
    """One part of the keys as :meth:`Criterion.on_parts` reads it: its rows of positive
    weight centered, the values in the search's units, the log-weights, the queries
    centered, and the (query, key) pairs to leave out (a query and every key with its exact
    input)."""
    X, Y, w = as_part(X, y, w)
    active = w > 0
    X, Y, w = X[active], Y[active], w[active]
    # The left-out pairs: candidates by the first input, then whole rows compared.
    left_queries, left_keys = [], []
    candidates = np.flatnonzero(np.isin(X[:, 0], queries[:, 0]))
    if len(candidates):
        index = {}
        for i, row in enumerate(map(tuple, queries)):
            index.setdefault(row, []).append(i)
        for j in candidates:
            for i in index.get(tuple(X[j]), ()):
                left_queries.append(i)
                left_keys.append(j)
    order = np.argsort(np.asarray(left_queries, dtype=int), kind="stable")
    return {
        "inputs": X - center,
        "values": (Y - y_offset) / y_scale,
        "log_weights": np.log(w / max_weight),
        "queries": queries - center,
        "left_out": (
            np.asarray(left_queries, dtype=int)[order],
            np.asarray(left_keys, dtype=int)[order],
        ),
    }


def part_sums(state, log_bandwidth, n_queries, factors, gradient, leave_out):
    """Per factor ``f`` of the bandwidth, ``(c, Σ)`` of the first ``n_queries`` queries
    against one prepared part's keys (:func:`gaussian_sums`; ``c = −∞`` for a query with no
    key here)."""
    h = np.exp(log_bandwidth)
    inputs, values = state["inputs"], state["values"]
    n_keys = len(inputs)
    if n_keys == 0:
        width = criterion_columns(inputs, values, gradient).shape[0]
        empty = (np.full(n_queries, -np.inf), np.zeros((n_queries, width)))
        return [empty for _ in factors]
    left_out = None
    if leave_out:
        rows, keys = state["left_out"]
        inside = rows < n_queries
        left_out = (rows[inside], keys[inside])
    K = inputs / h
    Q = state["queries"][:n_queries] / h
    K_aug = augment_keys(K, gaussian_key_bias(K))
    columns = criterion_columns(K, values, gradient)
    log_weights = state["log_weights"]
    # One BLAS thread: the products are small, and the other parts' tasks share the cores.
    with single_threaded_blas():
        return [
            gaussian_sums(Q, K_aug, log_weights, columns, f, left_out, _largest_norm(K_aug))
            for f in factors
        ]


def merge_part_sums(*parts):
    """The parts' ``(c, Σ)`` (per factor) merged at their shifts."""
    merged = []
    for pieces in zip(*parts, strict=True):
        top, sums = pieces[0]
        for other_top, other_sums in pieces[1:]:
            top, sums = merge(top, sums, other_top, other_sums)
        merged.append((top, sums))
    return merged
