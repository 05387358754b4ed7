"""The math layer: the one reduction and what it stands on.

``sums`` is the Nadaraya–Watson reduction (tiled online softmax, left-out pairs, merges of
sums taken at different shifts); ``blocks`` splits queries into blocks and reads the working
memory; ``numerics`` holds scale-free helpers; ``namespaces`` returns results in the caller's
array library; ``rows`` streams rows in chunks; ``loo`` holds the leave-one-out identities;
``warning_types`` the warnings the package emits. Nothing here knows an estimator.
"""
