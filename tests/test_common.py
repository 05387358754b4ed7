"""scikit-learn's estimator checks over every kernattn estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from kernattn import KernelSmoother

ESTIMATORS = [
    KernelSmoother(),
    KernelSmoother(bandwidth="silverman", degree=1),
    KernelSmoother(bandwidth="loo"),
    KernelSmoother(kernel="epanechnikov", bandwidth=0.5),
    KernelSmoother(kernel="tricube", bandwidth="loo"),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    check(estimator)
