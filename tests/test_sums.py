"""The reduction (:mod:`kernattn._core.sums`) against dense float64 formulas.

Every kernel sum, log-sum-exp and merge of shifted sums in kernattn goes through these
functions: they are checked here directly, on their own, with logits shifted far from 0
(±700, where ``exp`` over- or underflows; ±1e300, where a difference of two logits
overflows), empty key and query sets, removed keys, causal masks, float32, other array
libraries through the namespace, and any tiling of the keys.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernattn._core.sums import (
    EXP_FLOOR,
    UNDERFLOW,
    centered_sums,
    kernel_sums,
    log_softmax,
    log_sum_exp,
    merge,
    merge_centered,
    rescaling,
    shift_of,
    shifted_exp,
    softmax_weights,
    underflowed,
)

SHIFTS = [0.0, 700.0, -700.0, 1e300, -1e300]


def dense_sums(logits, columns):
    """``(max ℓ, exp(ℓ − max ℓ) @ C)`` row by row: the plain formula, in float64."""
    top = np.max(logits, axis=-1)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(invalid="ignore"):
        weights = np.exp(logits - safe[..., None])
    return top, weights @ columns


def dense_log_sum_exp(base, shift):
    """:math:`\\log \\sum e^{b_j + c}` as ``c + log Σ e^{b_j}``: exact in float64 for moderate
    ``base``, whatever the shift ``c``."""
    return shift + np.log(np.sum(np.exp(base), axis=-1))


def tiles_of(logits):
    """The callable :func:`kernel_sums` takes: a fresh copy of the logits of a key slice."""
    return lambda keys, out: np.array(logits[..., keys], copy=True)


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(7, 40))
    columns = np.column_stack([rng.normal(size=(40, 2)), np.ones(40)])
    return logits, columns


# ---------------------------------------------------------------- log_sum_exp


@pytest.mark.parametrize("shift", SHIFTS)
def test_log_sum_exp_matches_dense_formula_far_from_zero(shift):
    base = np.random.default_rng(1).normal(size=(5, 9))
    got = log_sum_exp(base + shift)
    np.testing.assert_allclose(got, dense_log_sum_exp(base, shift), rtol=1e-13)


def test_log_sum_exp_of_no_entry_or_removed_entries_is_minus_infinity():
    assert log_sum_exp(np.empty((3, 0))).tolist() == [-np.inf] * 3
    assert log_sum_exp(np.empty((3, 0)), keepdims=True).shape == (3, 1)
    rows = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    np.testing.assert_array_equal(log_sum_exp(rows), [-np.inf, 0.0])


def test_log_sum_exp_along_other_axes_and_kept():
    base = np.random.default_rng(2).normal(size=(4, 6, 3))
    for axis in (0, 1, 2):
        got = log_sum_exp(base, axis=axis, keepdims=True)
        expected = np.log(np.sum(np.exp(base), axis=axis, keepdims=True))
        np.testing.assert_allclose(got, expected, rtol=1e-13)


@pytest.mark.parametrize("shift", SHIFTS)
def test_log_softmax_is_logits_minus_log_sum_exp(shift):
    base = np.random.default_rng(3).normal(size=(4, 8))
    got = log_softmax(base + shift)
    expected = (base + shift) - dense_log_sum_exp(base, shift)[:, None]
    if abs(shift) < 1e300:
        np.testing.assert_allclose(got, expected, atol=1e-12 * max(1.0, abs(shift)))
    else:
        # Every logit rounds to the shift: the weights are uniform.
        np.testing.assert_allclose(got, np.full((4, 8), -math.log(8)), rtol=1e-13)


def test_log_softmax_of_a_row_with_nothing_left_is_minus_infinity_not_nan():
    got = log_softmax(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]))
    np.testing.assert_array_equal(got, [[-np.inf, -np.inf], [0.0, -np.inf]])


def test_shift_of_is_the_row_maximum_and_zero_for_a_row_with_nothing_left():
    logits = np.array([[1.0, 3.0], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(shift_of(logits), [[3.0], [0.0]])
    np.testing.assert_array_equal(shift_of(logits, axis=0), [[1.0, 3.0]])


# ---------------------------------------------------------------- kernel_sums


@pytest.mark.parametrize("shift", SHIFTS)
def test_kernel_sums_match_dense_formula_far_from_zero(problem, shift):
    logits, columns = problem
    top, sums = kernel_sums(tiles_of(logits + shift), 40, columns, tile=16)
    expected_top, expected = dense_sums(logits + shift, columns)
    np.testing.assert_array_equal(top, expected_top)
    if abs(shift) < 1e300:
        np.testing.assert_allclose(sums, expected, rtol=1e-9)
    else:
        # Shifted by 1e300 every logit rounds to the same float: every weight is 1.
        expected = np.tile(columns.sum(axis=0), (7, 1))
        np.testing.assert_allclose(sums, expected, rtol=1e-13, atol=1e-14)


def test_kernel_sums_ratio_is_the_softmax_average(problem):
    logits, columns = problem
    _, sums = kernel_sums(tiles_of(logits), 40, columns, tile=7)
    weights = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(sums[:, :2] / sums[:, 2:], weights @ columns[:, :2], rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    n_keys=st.integers(1, 50),
    tile=st.integers(1, 60),
    spread=st.sampled_from([0.1, 3.0, 300.0]),
    seed=st.integers(0, 2**16),
)
def test_kernel_sums_do_not_depend_on_the_tiling(n_keys, tile, spread, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=spread, size=(5, n_keys))
    columns = rng.normal(size=(n_keys, 3))
    top, sums = kernel_sums(tiles_of(logits), n_keys, columns, tile=tile)
    one_top, one_tile = kernel_sums(tiles_of(logits), n_keys, columns, tile=n_keys)
    np.testing.assert_array_equal(top, one_top)
    scale = np.abs(np.exp(logits - top[:, None])) @ np.abs(columns)
    np.testing.assert_allclose(sums, one_tile, rtol=0, atol=1e-13 * scale.max())


def test_kernel_sums_of_removed_keys_weigh_zero_and_all_removed_rows_give_zero(problem):
    logits, columns = problem
    masked = logits.copy()
    masked[0, ::2] = -np.inf
    masked[3, :] = -np.inf  # every key removed
    top, sums = kernel_sums(tiles_of(masked), 40, columns, removed=True, tile=8)
    assert top[3] == -np.inf
    np.testing.assert_array_equal(sums[3], 0.0)
    keep = np.arange(7) != 3
    expected_top, expected = dense_sums(masked[keep], columns)
    np.testing.assert_array_equal(top[keep], expected_top)
    np.testing.assert_allclose(sums[keep], expected, rtol=1e-12)


def test_kernel_sums_with_a_causal_mask(problem):
    logits, columns = problem
    n = 7
    causal = logits[:, :n].copy()
    causal[np.triu_indices(n, 1)] = -np.inf
    top, sums = kernel_sums(tiles_of(causal), n, columns[:n], removed=True, tile=3)
    expected_top, expected = dense_sums(causal, columns[:n])
    np.testing.assert_array_equal(top, expected_top)
    np.testing.assert_allclose(sums, expected, rtol=1e-12)
    # The first query sees only the first key.
    np.testing.assert_allclose(sums[0], columns[0], rtol=1e-15)


def test_kernel_sums_left_out_pairs_are_removed_keys(problem):
    logits, columns = problem
    rows, keys = np.array([0, 1, 1, 6]), np.array([0, 5, 39, 20])
    _, left_out = kernel_sums(tiles_of(logits), 40, columns, left_out=(rows, keys), tile=9)
    masked = logits.copy()
    masked[rows, keys] = -np.inf
    _, expected = dense_sums(masked, columns)
    np.testing.assert_allclose(left_out, expected, rtol=1e-12)


def test_kernel_sums_without_keys_raise_and_without_queries_are_empty(problem):
    _, columns = problem
    with pytest.raises(ValueError, match="at least one key"):
        kernel_sums(tiles_of(np.empty((3, 0))), 0, columns[:0])
    top, sums = kernel_sums(tiles_of(np.empty((0, 40))), 40, columns, tile=16)
    assert top.shape == (0,)
    assert sums.shape == (0, 3)


def test_kernel_sums_without_shift_are_the_plain_kernel_sums(problem):
    logits, columns = problem
    negative = -np.abs(logits)
    top, sums = kernel_sums(tiles_of(negative), 40, columns, shift=False, tile=16)
    np.testing.assert_array_equal(top, 0.0)
    np.testing.assert_allclose(sums, np.exp(negative) @ columns, rtol=1e-12)


def test_kernel_sums_in_units_of_a_power_of_two(problem):
    logits, columns = problem
    exponent = 900
    small = np.ldexp(logits, -exponent)
    top, sums = kernel_sums(tiles_of(small), 40, columns, exponent=exponent, tile=16)
    expected_top, expected = dense_sums(logits, columns)
    # The shifts come back in the logits' units.
    np.testing.assert_array_equal(np.ldexp(top, exponent), expected_top)
    np.testing.assert_allclose(sums, expected, rtol=1e-12)


def test_kernel_sums_with_squared_weights(problem):
    logits, columns = problem
    squared = columns[:, :1] ** 2
    _, sums = kernel_sums(tiles_of(logits), 40, columns, squared_columns=squared, tile=6)
    top = logits.max(axis=1, keepdims=True)
    weights = np.exp(logits - top)
    np.testing.assert_allclose(sums[:, :3], weights @ columns, rtol=1e-12)
    np.testing.assert_allclose(sums[:, 3:], weights**2 @ squared, rtol=1e-12)


def test_kernel_sums_accumulate_float32(problem):
    logits, columns = problem
    top, sums = kernel_sums(
        tiles_of(logits.astype(np.float32)), 40, columns.astype(np.float32), tile=16
    )
    assert sums.dtype == np.float32
    expected_top, expected = dense_sums(logits.astype(np.float32).astype(float), columns)
    np.testing.assert_allclose(top, expected_top, rtol=1e-6)
    np.testing.assert_allclose(sums, expected, rtol=2e-5, atol=2e-5)


def test_kernel_sums_exponentiate_in_a_lower_precision(problem):
    logits, columns = problem
    _, sums = kernel_sums(tiles_of(logits), 40, columns, precision=np.float32, tile=16)
    assert sums.dtype == np.float64
    _, expected = dense_sums(logits, columns)
    np.testing.assert_allclose(sums, expected, rtol=1e-5)


def test_kernel_sums_floor_weights_far_below_the_largest():
    logits = np.array([[0.0, -800.0, -2000.0]])
    columns = np.array([[0.0], [1.0], [1.0]])
    _, floored = kernel_sums(tiles_of(logits), 3, columns)
    np.testing.assert_allclose(floored, [[2 * math.exp(EXP_FLOOR)]], rtol=1e-12)
    _, exact = kernel_sums(tiles_of(logits), 3, columns, floor=False)
    np.testing.assert_array_equal(exact, [[0.0]])


# ---------------------------------------------------------------- merge


@pytest.mark.parametrize("shift", SHIFTS)
def test_merge_of_two_key_sets_is_the_sum_over_all_keys(problem, shift):
    logits, columns = problem
    logits = logits.copy()
    # One half of the keys far above the other: its shift is the merged one.
    logits[:, 25:] += shift
    top_a, sums_a = kernel_sums(tiles_of(logits[:, :25]), 25, columns[:25], tile=8)
    top_b, sums_b = kernel_sums(tiles_of(logits[:, 25:]), 15, columns[25:], tile=8)
    top, sums = merge(top_a, sums_a, top_b, sums_b)
    expected_top, expected = dense_sums(logits, columns)
    np.testing.assert_array_equal(top, expected_top)
    np.testing.assert_allclose(sums, expected, rtol=1e-12)
    # The order does not matter.
    top_ba, sums_ba = merge(top_b, sums_b, top_a, sums_a)
    np.testing.assert_array_equal(top_ba, top)
    np.testing.assert_allclose(sums_ba, sums, rtol=1e-15)


def test_merge_with_a_side_without_keys_adds_nothing(problem):
    logits, columns = problem
    top, sums = kernel_sums(tiles_of(logits), 40, columns, tile=16)
    none_top = np.full(7, -np.inf)
    merged_top, merged = merge(top, sums, none_top, np.zeros_like(sums))
    np.testing.assert_array_equal(merged_top, top)
    np.testing.assert_array_equal(merged, sums)
    both_top, both = merge(none_top, np.zeros_like(sums), none_top, np.zeros_like(sums))
    assert np.all(both_top == -np.inf)
    np.testing.assert_array_equal(both, 0.0)


def test_merge_with_one_shift_for_an_array_of_sums():
    top, sums = merge(np.array(0.0), np.ones((2, 3)), np.array(math.log(2.0)), np.ones((2, 3)))
    assert float(top) == pytest.approx(math.log(2.0))
    np.testing.assert_allclose(sums, np.full((2, 3), 1.5), rtol=1e-15)


# ---------------------------------------------------------------- centered sums


def dense_moments(logits, values):
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    total = weights.sum(axis=1)
    mean = weights @ values / total[:, None]
    m2 = np.stack(
        [np.sum(weights * (values[:, o] - mean[:, o : o + 1]) ** 2, axis=1) for o in range(2)],
        axis=1,
    )
    return total, mean, m2


@pytest.mark.parametrize("offset", [0.0, 1e8])
def test_centered_sums_match_dense_moments(problem, offset):
    logits, columns = problem
    values = columns[:, :2] + offset
    top, total, mean, m2 = centered_sums(tiles_of(logits), 40, values, tile=6)
    # The reference on the same values moved back to 0 (exactly: they lie within a factor
    # of two of the offset), where the plain formula keeps its digits.
    expected_total, expected_mean, expected_m2 = dense_moments(logits, values - offset)
    expected_mean = expected_mean + offset
    np.testing.assert_array_equal(top, logits.max(axis=1))
    np.testing.assert_allclose(total, expected_total, rtol=1e-12)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-12)
    # About their own mean: the spread keeps its digits however far the values sit from 0
    # (an error of a few ulps of the offset per unit of weight; E[v²] − E[v]² would lose
    # the offset's square times that, here everything).
    slack = 4 * np.finfo(float).eps * offset * total[:, None]
    np.testing.assert_array_less(np.abs(m2 - expected_m2), 1e-7 * expected_m2 + slack)


@settings(max_examples=25, deadline=None)
@given(tile=st.integers(1, 45), seed=st.integers(0, 2**16))
def test_centered_sums_do_not_depend_on_the_tiling(tile, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=4.0, size=(3, 40))
    values = rng.normal(size=(40, 2))
    _, total, mean, m2 = centered_sums(tiles_of(logits), 40, values, tile=tile)
    _, one_total, one_mean, one_m2 = centered_sums(tiles_of(logits), 40, values, tile=40)
    np.testing.assert_allclose(total, one_total, rtol=1e-12)
    np.testing.assert_allclose(mean, one_mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m2, one_m2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shift", [0.0, 700.0, -700.0])
def test_merge_centered_of_two_key_sets_is_the_state_over_all_keys(problem, shift):
    logits, columns = problem
    logits = logits.copy()
    logits[:, 30:] += shift
    values = columns[:, :2]
    a = centered_sums(tiles_of(logits[:, :30]), 30, values[:30], tile=8)
    b = centered_sums(tiles_of(logits[:, 30:]), 10, values[30:], tile=8)
    top, total, mean, m2 = merge_centered(a, b)
    whole = centered_sums(tiles_of(logits), 40, values, tile=8)
    np.testing.assert_array_equal(top, whole[0])
    np.testing.assert_allclose(total, whole[1], rtol=1e-12)
    np.testing.assert_allclose(mean, whole[2], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m2, whole[3], rtol=1e-9, atol=1e-12)


def test_merge_centered_with_a_state_without_keys_adds_nothing(problem):
    logits, columns = problem
    state = centered_sums(tiles_of(logits), 40, columns[:, :2], tile=8)
    nothing = (np.full(7, -np.inf), np.zeros(7), np.zeros((7, 2)), np.zeros((7, 2)))
    merged = merge_centered(state, nothing)
    for got, expected in zip(merged, state, strict=True):
        np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------- weights and guards


@pytest.mark.parametrize("shift", SHIFTS)
def test_softmax_weights_match_dense_softmax(shift):
    base = np.random.default_rng(4).normal(size=(4, 6))
    got = softmax_weights(base + shift)
    if abs(shift) < 1e300:
        expected = np.exp(base) / np.exp(base).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(got, expected, rtol=1e-10)
    else:
        np.testing.assert_array_equal(got, np.full((4, 6), 1 / 6))


def test_softmax_weights_of_removed_entries_and_rows_with_nothing_left():
    logits = np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf]])
    got = softmax_weights(logits.copy(), removed=True)
    np.testing.assert_array_equal(got, [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])


def test_softmax_weights_in_units_of_a_power_of_two():
    base = np.random.default_rng(5).normal(size=(3, 5))
    got = softmax_weights(np.ldexp(base, -600), exponent=600)
    np.testing.assert_allclose(got, softmax_weights(base.copy()), rtol=1e-13)


@pytest.mark.parametrize("shift", SHIFTS)
def test_shifted_exp_makes_the_largest_entry_one(shift):
    base = np.random.default_rng(6).normal(size=(3, 5))
    got = shifted_exp(base + shift)
    np.testing.assert_array_equal(got.max(axis=1), 1.0)
    if abs(shift) < 1e300:
        expected = np.exp(base - base.max(axis=1, keepdims=True))
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_shifted_exp_floors_far_entries():
    got = shifted_exp(np.array([[0.0, -1e4]]))
    np.testing.assert_allclose(got, [[1.0, math.exp(EXP_FLOOR)]], rtol=1e-12)


def test_underflowed_flags_vanishing_and_overflowed_rows():
    sums = np.array([1.0, UNDERFLOW / 2, 0.0, np.inf, np.nan, UNDERFLOW])
    np.testing.assert_array_equal(underflowed(sums), [False, True, True, True, True, False])
    sums32 = np.array([1.0, 1e-31, 1e-29], dtype=np.float32)
    np.testing.assert_array_equal(underflowed(sums32), [False, True, False])


# ---------------------------------------------------------------- other array libraries


@pytest.fixture(params=["torch", "array_api_strict"])
def xp(request):
    return pytest.importorskip(request.param)


def to_numpy(a):
    return np.from_dlpack(a)


def as_xp(xp, a):
    return xp.asarray(np.ascontiguousarray(a))


def test_log_sum_exp_in_other_namespaces(xp):
    base = np.random.default_rng(7).normal(size=(4, 5))
    base[1] = -np.inf
    got = log_sum_exp(as_xp(xp, base + 700.0))
    expected = log_sum_exp(base + 700.0)
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-14)


def test_kernel_sums_in_other_namespaces(xp, problem):
    logits, columns = problem
    masked = logits.copy()
    masked[2] = -np.inf
    masked[0, :5] = -np.inf
    logits_xp, columns_xp = as_xp(xp, masked), as_xp(xp, columns)

    def tiles(keys, out):
        return logits_xp[:, keys] + 0.0

    top, sums = kernel_sums(tiles, 40, columns_xp, removed=True, tile=16, xp=None)
    expected_top, expected = kernel_sums(tiles_of(masked), 40, columns, removed=True, tile=16)
    np.testing.assert_array_equal(to_numpy(top), expected_top)
    np.testing.assert_allclose(to_numpy(sums), expected, rtol=1e-12)


def test_merge_and_softmax_weights_in_other_namespaces(xp):
    rng = np.random.default_rng(8)
    sums_a, sums_b = rng.random((3, 2)), rng.random((3, 2))
    top_a, top_b = np.array([0.0, 700.0, -np.inf]), np.array([1.0, -700.0, 3.0])
    top, sums = merge(as_xp(xp, top_a), as_xp(xp, sums_a), as_xp(xp, top_b), as_xp(xp, sums_b))
    expected_top, expected = merge(top_a, sums_a, top_b, sums_b)
    np.testing.assert_array_equal(to_numpy(top), expected_top)
    np.testing.assert_allclose(to_numpy(sums), expected, rtol=1e-14)
    logits = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    weights = softmax_weights(as_xp(xp, logits))
    expected = softmax_weights(logits.copy(), removed=True)
    np.testing.assert_allclose(to_numpy(weights), expected, rtol=1e-15)


def test_kernel_sums_differentiate_on_torch(problem):
    torch = pytest.importorskip("torch")
    logits, columns = problem
    leaf = torch.tensor(logits, requires_grad=True)
    _, sums = kernel_sums(lambda keys, out: leaf[:, keys], 40, torch.tensor(columns), tile=16)
    ratio = sums[:, 0] / sums[:, 2]
    ratio.sum().backward()
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    mean = weights @ columns[:, 0]
    # d(Σ w v / Σ w)/dℓ_j = w_j (v_j − mean)
    expected = weights * (columns[:, 0][None, :] - mean[:, None])
    np.testing.assert_allclose(leaf.grad.numpy(), expected, rtol=1e-10, atol=1e-14)


def test_kernel_sums_of_base_two_logits(problem):
    logits, columns = problem
    binary = logits * math.log2(math.e)
    top, sums = kernel_sums(tiles_of(binary), 40, columns, binary=True, tile=16)
    expected_top, expected = dense_sums(logits, columns)
    np.testing.assert_array_equal(top, binary.max(axis=1))
    np.testing.assert_allclose(sums, expected, rtol=1e-12)


def test_kernel_sums_of_base_two_logits_in_other_namespaces(xp, problem):
    logits, columns = problem
    masked = logits * math.log2(math.e)
    masked[1, 3:] = -np.inf
    logits_xp = as_xp(xp, masked)
    top, sums = kernel_sums(
        lambda keys, out: logits_xp[:, keys] + 0.0,
        40,
        as_xp(xp, columns),
        removed=True,
        binary=True,
        tile=16,
    )
    natural = masked / math.log2(math.e)
    _, expected = dense_sums(natural, columns)
    np.testing.assert_array_equal(to_numpy(top), masked.max(axis=1))
    np.testing.assert_allclose(to_numpy(sums), expected, rtol=1e-12)


def test_rescaling_takes_sums_from_one_shift_to_another():
    """Sums at shift c times e^(c − c') are the sums at shift c': the same exponentials
    summed at c'; a part that summed nothing (shift −inf) contributes 0, never NaN, even
    onto a shift of −inf."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 9)) * 30
    values = rng.normal(size=(9, 2))
    top, sums = dense_sums(logits, values)
    onto = top + rng.uniform(0, 50, size=4)
    np.testing.assert_allclose(
        sums * rescaling(top, onto)[:, None], np.exp(logits - onto[:, None]) @ values
    )
    factors = rescaling(np.array([-np.inf, 1.0, -np.inf]), np.array([2.0, 2.0, -np.inf]))
    np.testing.assert_array_equal(factors, [0.0, np.exp(-1.0), 0.0])
    # One shift for several rows broadcasts.
    np.testing.assert_allclose(rescaling(np.array([0.0, -1.0]), 1.0), np.exp([-1.0, -2.0]))
