"""scikit-learn's estimator checks over every kernattn estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from kernattn import KernelSmoother, LinearAttentionRegressor

ESTIMATORS = [
    KernelSmoother(),
    KernelSmoother(bandwidth="silverman", degree=1),
    KernelSmoother(bandwidth="loo"),
    KernelSmoother(kernel="epanechnikov", bandwidth=0.5),
    KernelSmoother(kernel="tricube", bandwidth="loo"),
    LinearAttentionRegressor(),
    LinearAttentionRegressor(feature_map="trig", orthogonal=False),
    LinearAttentionRegressor(feature_map="hyperbolic", bandwidth="loo"),
    LinearAttentionRegressor(feature_map="optimal"),
    LinearAttentionRegressor(feature_map="elu", bandwidth=1.0),
    LinearAttentionRegressor(feature_map="relu", n_features=16),
    LinearAttentionRegressor(learn_projection=True),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    check(estimator)
