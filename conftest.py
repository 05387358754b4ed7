"""pytest configuration: a module that needs an optional extra is not collected without it."""

collect_ignore = []
try:
    import dask.array  # noqa: F401
except ImportError:
    # The Dask path is imported only when a dask collection is passed; without the extra
    # its doctests are not collected (tests/test_dask.py skips itself).
    collect_ignore.append("kernattn/_dask.py")
