"""Conformal intervals with coverage given the training rows (``confidence``): the rank of
the residual that bounds them against the Beta law of a conformal interval's coverage, the
guarantee over repeated calibration sets, and the errors."""

import numpy as np
import pytest
from scipy.stats import beta, norm

from kernattn import KernelSmoother
from kernattn._engine.distribution import SplitCalibration, conformal_level
from kernattn.metrics import coverage_scorer, interval_width_scorer


@pytest.mark.parametrize("n", [20, 100, 358, 2000, 100_000])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.3])
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.99])
def test_level_is_the_smallest_rank_whose_coverage_law_meets_the_confidence(n, alpha, confidence):
    # The coverage of the k-th smallest of n exchangeable residuals, given them, is
    # Beta(k, n + 1 − k): the level is the smallest k with P{coverage < 1 − α} ≤ δ.
    k = conformal_level(n, alpha, confidence)
    failing = lambda k: beta.cdf(1 - alpha, k, n + 1 - k)  # noqa: E731
    if k <= n:
        assert k == int(k)
        assert failing(k) <= 1 - confidence + 1e-12
        assert k == 1 or failing(k - 1) > 1 - confidence
    else:
        assert k == n + 1 and failing(n) > 1 - confidence
    # At 0.5 it is the median of Bin(n, 1 − α), about the marginal rank; above, more.
    marginal = np.ceil((1 - alpha) * (n + 1) * (1 - 1e-12))
    assert k >= marginal - 1 if confidence == 0.5 else k > marginal


def test_without_confidence_the_level_is_the_marginal_one():
    assert conformal_level(19, 0.1) == pytest.approx(18.0)
    assert conformal_level(100, 0.2) == pytest.approx(80.8)


def exact_coverage(half_width, noise=1.0):
    """The share of new observations y = μ(x) + N(0, noise²) that μ(x) ± q holds."""
    return 2 * norm.cdf(half_width / noise) - 1


def test_split_intervals_cover_given_their_calibration_rows_with_the_confidence():
    # Many calibration sets of 150 rows: with confidence 0.9, at most about 10 % of them
    # give an interval that covers less than 90 % of new observations; without it, about
    # half do.
    rng = np.random.default_rng(0)
    alpha, confidence, n = 0.1, 0.9, 150
    short = {None: 0, confidence: 0}
    draws = 2000
    for _ in range(draws):
        calibration = SplitCalibration(np.abs(rng.normal(size=(n, 1))))
        for level in short:
            coverage = exact_coverage(calibration.half_width(alpha, level)[0])
            short[level] += coverage < 1 - alpha
    # Binomial(2 000, 0.1) has sd 0.0067: 0.125 is almost four of them above 0.1.
    assert short[confidence] / draws <= 0.125
    assert short[None] / draws >= 0.35


def calibrated_smoother(n, seed, bandwidth, noise):
    """A smoother fitted on n rows of y = x + noise and calibrated on n more, and all rows."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(2 * n, 1))
    y = X[:, 0] + noise * rng.normal(size=2 * n)
    model = KernelSmoother(bandwidth=bandwidth).fit(X[:n], y[:n])
    return model.calibrate(X[n:], y[n:]), X, y


def test_split_interval_is_the_residual_of_that_rank():
    model, X, y = calibrated_smoother(100, 1, 0.1, 0.2)
    residuals = np.sort(np.abs(y[100:] - model.predict(X[100:])))
    k = int(conformal_level(100, 0.1, 0.95))
    lower, upper = model.conformal_interval(X[:5], 0.1, "split", confidence=0.95)
    np.testing.assert_allclose(upper - model.predict(X[:5]), residuals[k - 1], rtol=1e-12)
    np.testing.assert_allclose(model.predict(X[:5]) - lower, residuals[k - 1], rtol=1e-12)


def test_too_few_rows_for_the_confidence_give_unbounded_intervals():
    model, X, _ = calibrated_smoother(15, 2, 0.2, 0.1)
    # 15 residuals: P{Bin(15, 0.9) ≥ 15} = 0.21 > 0.01, no rank is enough.
    lower, upper = model.conformal_interval(X[:3], 0.1, "split", confidence=0.99)
    assert np.all(np.isneginf(lower)) and np.all(np.isposinf(upper))


@pytest.mark.parametrize("method", ["jackknife+", "cv+"])
def test_confidence_widens_jackknife_and_cv_plus_intervals(method):
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(120, 1))
    y = np.sin(5 * X[:, 0]) + 0.2 * rng.normal(size=120)
    model = KernelSmoother(bandwidth=0.08).fit(X, y)
    Q = np.linspace(0.05, 0.95, 7)[:, None]
    widths = []
    for confidence in (None, 0.5, 0.9, 0.99):
        lower, upper = model.conformal_interval(Q, 0.1, method, n_folds=10, confidence=confidence)
        assert np.all(lower < model.predict(Q)) and np.all(model.predict(Q) < upper)
        widths.append(upper - lower)
    widths = np.array(widths)
    assert np.all(np.diff(widths, axis=0) >= -1e-12)
    assert np.all(widths[-1] > widths[0])


def test_scorers_pass_the_confidence():
    rng = np.random.default_rng(4)
    X = rng.uniform(size=(150, 1))
    y = X[:, 0] + 0.2 * rng.normal(size=150)
    model = KernelSmoother(bandwidth=0.1).fit(X, y)
    Xq = rng.uniform(size=(400, 1))
    yq = Xq[:, 0] + 0.2 * rng.normal(size=400)
    lower, upper = model.conformal_interval(Xq, 0.1, "jackknife+", confidence=0.9)
    assert coverage_scorer(0.1, confidence=0.9)(model, Xq, yq) == pytest.approx(
        np.mean((lower <= yq) & (yq <= upper))
    )
    assert interval_width_scorer(0.1, confidence=0.9)(model, Xq, yq) == pytest.approx(
        -np.mean(upper - lower)
    )
    assert "confidence=0.9" in repr(coverage_scorer(confidence=0.9))


@pytest.mark.parametrize("confidence", [0, 1, 1.5, -0.1, True, "0.9", np.nan])
def test_a_bad_confidence_is_refused_by_name(confidence):
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(40, 1))
    model = KernelSmoother(bandwidth=0.2).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="confidence must be None"):
        model.conformal_interval(X[:2], confidence=confidence)
    with pytest.raises(ValueError, match="confidence must be None"):
        coverage_scorer(confidence=confidence)


def test_local_intervals_refuse_a_confidence():
    rng = np.random.default_rng(6)
    X = rng.uniform(size=(40, 1))
    model = KernelSmoother(bandwidth=0.2).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="method='local' does not take"):
        model.conformal_interval(X[:2], method="local", confidence=0.9)
