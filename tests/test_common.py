"""scikit-learn's estimator checks over every kernattn estimator."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernattn import (
    AttentionClassifier,
    AttentionRegressor,
    KernelClassifier,
    KernelSmoother,
    LinearAttentionRegressor,
)

# The checks fit tiny random data sets at bandwidths where random feature maps serve few
# queries (the warning that prediction is no longer linear-time is tested in test_linear.py),
# and local polynomials whose local designs cannot support some queries, which are held back
# (tested in test_smoother.py).
pytestmark = [
    pytest.mark.filterwarnings("ignore::kernattn.linear.NotLinearTimeWarning"),
    pytest.mark.filterwarnings("ignore::kernattn.LocalDesignWarning"),
]

ESTIMATORS = [
    KernelSmoother(),
    KernelSmoother(bandwidth="silverman", degree=1),
    KernelSmoother(bandwidth=0.8, degree=2),
    KernelSmoother(bandwidth="gcv", degree="auto"),
    KernelSmoother(bandwidth="loo"),
    KernelSmoother(kernel="epanechnikov", bandwidth=0.5),
    KernelSmoother(kernel="tricube", bandwidth="loo"),
    AttentionRegressor(max_iter=5, random_state=0),
    AttentionRegressor(similarity="cosine", scale="learned", max_iter=5, random_state=0),
    AttentionRegressor(similarity="gaussian", tie_qk=True, n_heads=3, max_iter=5, random_state=0),
    AttentionRegressor(n_heads=3, optimizer="adam", batch_size=8, max_iter=3, random_state=0),
    AttentionRegressor(warp=4, max_iter=5, random_state=0),
    AttentionRegressor(degree=1, warp=3, n_heads=2, max_iter=5, random_state=0),
    AttentionRegressor(tilt=True, warp=3, max_iter=5, random_state=0),
    AttentionRegressor(
        similarity="gaussian",
        optimizer="adam",
        init="pca",
        batch_size=16,
        learning_rate=0.1,
        max_iter=5,
        random_state=0,
    ),
    LinearAttentionRegressor(),
    LinearAttentionRegressor(feature_map="trig", orthogonal=False),
    LinearAttentionRegressor(feature_map="hyperbolic", bandwidth="loo"),
    LinearAttentionRegressor(feature_map="optimal"),
    LinearAttentionRegressor(feature_map="elu", bandwidth=1.0),
    LinearAttentionRegressor(feature_map="relu", n_components=16),
    LinearAttentionRegressor(feature_map="nystroem", n_components=32),
    LinearAttentionRegressor(feature_map="positive", learn_projection=True),
    KernelClassifier(),
    KernelClassifier(bandwidth="loo"),
    KernelClassifier(bandwidth_type="generalized_nn"),
    AttentionClassifier(max_iter=5, random_state=0),
    AttentionClassifier(n_heads=2, loss="log", similarity="dot", max_iter=5, random_state=0),
]


# Warnings the checks provoke by design, not defects:
# - the AttentionRegressors above stop after a few iterations to keep the checks fast, so
#   every fit ends with a ConvergenceWarning;
# - the checks fit on small random data whose features barely matter to the target, so a
#   leave-one-out bandwidth ("loo") ends on the edge of its search range and fit says so;
# - trigonometric features are signed, and 16 ReLU features can all be zero for a query, so
#   on this data some queries' linear-attention denominators are not safely positive:
#   predict falls back to the training mean for them and says so.
@pytest.mark.filterwarnings(
    "ignore:AttentionRegressor's .* optimizer stopped at max_iter:"
    "sklearn.exceptions.ConvergenceWarning"
)
@pytest.mark.filterwarnings(
    "ignore:.*the leave-one-out bandwidth of feature:kernattn.bandwidth.BandwidthWarning"
)
@pytest.mark.filterwarnings(
    "ignore:.* queries had a linear-attention denominator that is not safely positive:UserWarning"
)
def expected_failed_checks(estimator):
    """Checks an estimator is known to fail, and why."""
    if isinstance(estimator, KernelSmoother) and estimator.degree == 1:
        return {
            "check_sample_weight_equivalence_on_dense_data": (
                "15 rows in 30 dimensions: a query far from its local design is held back "
                "by a ridge set from Σ l², which that design resolves to about 1e-6; integer "
                "weights and repeated rows, summed in another order, then agree to 1.3e-7, "
                "not the check's 1e-7 (equivalent in exact arithmetic: the squared weights' "
                "sums are divided by the precision weights, tested in test_smoother.py)"
            )
        }
    if isinstance(estimator, KernelSmoother) and estimator.kernel == "tricube":
        return {
            "check_sample_weight_equivalence_on_dense_data": (
                "15 rows in 30 dimensions under a compact kernel: the leave-one-out "
                "criterion is exactly 1/9 over a wide region of the 30 bandwidths (its "
                "gradient below 1e-10 there), the same for integer weights and repeated "
                "rows; the search, whose steps differ by the sums' rounding (which depends "
                "on the processor's vector width), can stop at two points of that plateau, "
                "whose fits differ (the criterion for weights and repeated rows agrees to "
                "1e-10: test_bandwidth.py)"
            )
        }
    if isinstance(estimator, AttentionRegressor) and isinstance(estimator.init, str):
        failures = {}
        if estimator.init == "loo":
            failures["check_sample_weight_equivalence_on_dense_data"] = (
                "15 rows in 30 dimensions: the start at the leave-one-out bandwidths is "
                "a search over 30 bandwidths on the standardized inputs, whose weighted "
                "and repeated-row standardizations differ by rounding, and it ends at "
                "another of its many near-equal optima (KernelSmoother(bandwidth='loo') "
                "on the raw inputs passes; so does init='identity', and "
                "test_learned.py's test of integer weights against repeated rows)"
            )
        if estimator.degree == 1:
            failures["check_methods_subset_invariance"] = (
                "20 rows in 3 dimensions, a learned head that puts its weight on two keys "
                "about 1e5 of its bandwidths from the center: the local line's moments "
                "are summed about an anchor up to 1 024 bandwidths away and keep about "
                "1e-10 of their digits, and a batch's matrix products round otherwise than "
                "one row's (query coordinates 6e-11 apart), so one of the 20 predictions "
                "moves by 4.8e-7 (relative 1.8e-6), above the check's 1e-7"
            )
        return failures
    if isinstance(estimator, KernelClassifier) and estimator.bandwidth == "loo":
        return {
            "check_sample_weight_equivalence_on_dense_data": (
                "15 rows in 30 dimensions: KernelSmoother(bandwidth='loo') on the one-hot "
                "codes of three classes searches 30 bandwidths and stops within its "
                "tolerance, 5e-7 apart for integer weights and repeated rows; the "
                "probabilities then agree to 4e-7, not the check's 1e-7 (the default "
                "likelihood search, over one factor to the root of its slope, agrees to 5e-12)"
            )
        }
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    check(estimator)
