"""scikit-learn's estimator checks over every kernattn estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor

ESTIMATORS = [
    KernelSmoother(),
    KernelSmoother(bandwidth="silverman", degree=1),
    KernelSmoother(bandwidth="loo"),
    KernelSmoother(kernel="epanechnikov", bandwidth=0.5),
    KernelSmoother(kernel="tricube", bandwidth="loo"),
    AttentionRegressor(max_iter=5, random_state=0),
    AttentionRegressor(similarity="cosine", scale="learned", max_iter=5, random_state=0),
    AttentionRegressor(similarity="gaussian", tie_qk=True, n_heads=3, max_iter=5, random_state=0),
    AttentionRegressor(n_heads=3, optimizer="adam", batch_size=8, max_iter=3, random_state=0),
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
    LinearAttentionRegressor(learn_projection=True),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    check(estimator)
