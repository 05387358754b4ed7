"""The ``kernattn`` command line.

``kernattn compare`` cross-validates the kernattn estimators and two scikit-learn baselines on
built-in regression tasks (or the classifiers on the classification tasks), prints a line per
(task, estimator) and then the table, and writes ``results.csv``, ``results.json`` and
``comparison.png``. A bare ``kernattn``, with no sub-command, prints the help and exits with
status 2 (argparse's convention for a missing argument), as do bad option values, with a
one-line message.
"""

import argparse
import os
import sys
import tempfile
import time

import kernattn

_DEFAULT_OUT = "kernattn-results"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit code 2), no usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _names(kind, choices, every=None):
    """An argparse type: comma-separated names from ``choices`` (or ``all``: ``every``, by
    default all the choices)."""

    def parse(text):
        names = [name.strip() for name in text.split(",") if name.strip()]
        if names == ["all"]:
            return list(choices if every is None else every)
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {unknown[0] if unknown else text!r}; choose from "
                f"{', '.join(choices)} (comma-separated) or all"
            )
        return list(dict.fromkeys(names))

    parse.__name__ = kind
    return parse


def _integer(minimum):
    """An argparse type: an integer of at least ``minimum`` (argparse names the option)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}; got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _n_jobs(text):
    """An argparse type for ``--n-jobs``: -1 (all cores) or 1 up to a cap of 4 × the cores.

    A process per job is started: thousands of them would stall the machine, not speed up a
    comparison that has a few splits at a time.
    """
    from joblib import cpu_count

    cores = cpu_count()
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}") from None
    if value == -1:
        return value
    if not 1 <= value <= 4 * cores:
        raise argparse.ArgumentTypeError(
            f"must be -1 (all {cores} cores) or from 1 to {4 * cores} (4 x the cores); got {value}"
        )
    return value


_n_jobs.__name__ = "n_jobs"


def _check_out(path):
    """Fail now, not after the whole run, if the results cannot be written to ``path``.

    ``path`` must be a folder or not exist yet, in a folder we can write to. A probe file is
    created and removed there (permission bits say nothing when running as root or on a
    read-only file system).
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"cannot write the results to --out {path}: it is a file, not a folder")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(
            f"cannot write the results to --out {path}: {existing} is a file, not a folder"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise ValueError(
            f"cannot write the results to --out {path}: {exc.strerror or exc}"
        ) from None


def build_parser():
    from kernattn.compare import (
        DEFAULT_TASKS,
        QUICK_TASKS,
        default_classifiers,
        default_estimators,
    )
    from kernattn.datasets import CLASSIFICATION_TASKS, TASKS

    regressor_names = list(default_estimators())
    classifier_names = list(default_classifiers())
    parser = _Parser(
        prog="kernattn",
        description=(
            "Attention as a kernel smoother: fit and compare Nadaraya-Watson, learned-kernel "
            "attention and random-feature linear attention on regression tasks."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kernattn {kernattn.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    compare = commands.add_parser(
        "compare",
        help="cross-validate the estimators on regression (or classification) tasks and write a "
        "report",
        description=(
            "Cross-validate every estimator on every task with the same splits; print a line "
            "as each (task, estimator) finishes, then the table of held-out R², MSE (log-loss "
            "and accuracy on classification tasks), fit and predict time; write results.csv, "
            "results.json and comparison.png to --out."
        ),
    )
    compare.add_argument(
        "--tasks",
        # 'all' is every regression task: classification tasks take other estimators.
        type=_names("task", [*TASKS, *CLASSIFICATION_TASKS], every=list(TASKS)),
        default=None,
        metavar="NAMES",
        help=(
            f"comma-separated tasks from: {', '.join(TASKS)}; or all. Default: "
            f"{','.join(DEFAULT_TASKS)} ({','.join(QUICK_TASKS)} with --quick). 'large' has "
            "10 000 samples (2 000 with --quick): the exact estimators and kernel ridge take "
            "minutes or more there, so choose --estimators for it. Or classification "
            f"tasks from: {', '.join(CLASSIFICATION_TASKS)}, which compare the classifiers "
            "on held-out log-loss and accuracy"
        ),
    )
    compare.add_argument(
        "--estimators",
        type=_names("estimator", [*regressor_names, *classifier_names]),
        default=None,
        metavar="NAMES",
        help=(
            f"comma-separated estimators from: {', '.join(regressor_names)}; default: all. "
            f"For classification tasks, from: {', '.join(classifier_names)}"
        ),
    )
    folds = "number of cross-validation folds (default: 5, or 3 with --quick)"
    repeats = "repeat the folds R times with fresh shuffles (default: 1)"
    seed = (
        "random seed (default: 0); the seeds of the tasks, the splitter and the "
        "estimators are drawn from it, and the output reports all of them"
    )
    # The integer options: (flag, smallest value, default, metavar, help).
    integer_options = [
        ("--folds", 2, None, "K", folds),
        ("--repeats", 1, 1, "R", repeats),
        ("--seed", 0, 0, "S", seed),
    ]
    for flag, minimum, default, metavar, text in integer_options:
        compare.add_argument(
            flag, type=_integer(minimum), default=default, metavar=metavar, help=text
        )
    compare.add_argument(
        "--n-jobs",
        type=_n_jobs,
        default=1,
        metavar="N",
        help=(
            "fit N splits in parallel, -1 for all cores, at most 4 x the cores; each fit "
            "uses one thread (default: 1)"
        ),
    )
    compare.add_argument(
        "--out",
        default=_DEFAULT_OUT,
        metavar="DIR",
        help=(
            "folder for results.csv, results.json and comparison.png, created if missing "
            f"(default: ./{_DEFAULT_OUT}/)"
        ),
    )
    compare.add_argument(
        "--show-warnings",
        action="store_true",
        help=(
            "after the table, print the distinct warning messages of each (task, estimator) "
            "(the table only counts them; results.json keeps them either way)"
        ),
    )
    compare.add_argument(
        "--quick",
        action="store_true",
        help="smaller tasks, 3 folds and smaller tuning grids: a run of seconds",
    )
    return parser


def _save_figure(result, path):
    from matplotlib.figure import Figure

    n_tasks = max(len(result.tasks), 1)
    classification = result.task_type == "classification"
    scores = ["log_loss", "accuracy"] if classification else ["r2"]
    figure = Figure(
        figsize=(max(8.0, 1.6 * n_tasks + 4), 7.5 + 3.0 * classification), layout="constrained"
    )
    axes = figure.subplots(len(scores) + 1, 1, sharex=True)
    for ax, metric in zip(axes, [*scores, "time"], strict=True):
        result.plot(metric, ax=ax)
        if ax is not axes[0]:
            ax.get_legend().remove()
    score = "scores" if classification else "R²"
    figure.suptitle(
        f"kernattn compare: held-out {score} (mean ± std over the splits) and time per split"
    )
    figure.savefig(path, dpi=120)


def _choose_tasks(args):
    """The task names and estimators that ``args`` ask for: classification tasks take the
    classifiers, regression tasks the regressors, never a mix."""
    from kernattn.compare import default_classifiers, default_estimators
    from kernattn.datasets import CLASSIFICATION_TASKS

    tasks = args.tasks
    chosen = [name for name in tasks or () if name in CLASSIFICATION_TASKS]
    if chosen and len(chosen) < len(tasks):
        others = [name for name in tasks if name not in CLASSIFICATION_TASKS]
        raise ValueError(
            f"--tasks mixes classification tasks ({','.join(chosen)}) and regression tasks "
            f"({','.join(others)}); run them separately"
        )
    if chosen:
        estimators, kind = default_classifiers(quick=args.quick), "classification"
    else:
        estimators, kind = default_estimators(quick=args.quick), "regression"
    if args.estimators is not None:
        wrong = [name for name in args.estimators if name not in estimators]
        if wrong:
            raise ValueError(
                f"--estimators {wrong[0]} does not fit {kind} tasks; choose from "
                f"{', '.join(estimators)}"
            )
        estimators = {name: estimators[name] for name in args.estimators}
    return tasks, estimators


def run_compare(args, out=None):
    """Run ``kernattn compare`` with parsed ``args``; print to ``out`` (default stdout)."""
    from kernattn.compare import compare, derive_seeds, load_tasks

    out = sys.stdout if out is None else out
    _check_out(args.out)
    task_names, estimators = _choose_tasks(args)
    # The tasks get the seed compare() would draw for them from --seed, so the one seed
    # reported (header, footer, results.json) accounts for the tasks, splits and estimators.
    seeds = derive_seeds(args.seed)
    tasks = load_tasks(task_names, quick=args.quick, random_state=seeds["tasks"])
    folds = args.folds if args.folds is not None else (3 if args.quick else 5)
    for name, task in tasks.items():
        if folds > len(task.X):
            raise ValueError(f"--folds {folds} is more than the {len(task.X)} samples of {name}")
    print(
        f"kernattn {kernattn.__version__}: {len(estimators)} estimators x {len(tasks)} tasks, "
        f"{folds}-fold cross-validation"
        + (f" x {args.repeats} repeats" if args.repeats > 1 else "")
        + f", seed {args.seed} (drawn from it: tasks {seeds['tasks']}, "
        f"splitter random_state={seeds['splits']}, "
        f"estimators random_state={seeds['estimators']})",
        file=out,
        flush=True,
    )
    start = time.perf_counter()
    result = compare(
        estimators,
        tasks,
        cv=folds,
        n_repeats=args.repeats,
        random_state=args.seed,
        n_jobs=args.n_jobs,
        verbose=2,
    )
    result.settings["seeds"]["tasks"] = seeds["tasks"]
    print(file=out)
    print(result, file=out)
    if args.show_warnings:
        report = result.warnings_report()
        print("\nwarnings:\n" + report, file=out)
    os.makedirs(args.out, exist_ok=True)
    paths = [os.path.join(args.out, name) for name in ("results.csv", "results.json")]
    result.to_csv(paths[0])
    result.to_json(paths[1])
    paths.append(os.path.join(args.out, "comparison.png"))
    _save_figure(result, paths[2])
    print(
        f"\nwrote {', '.join(paths)} ({time.perf_counter() - start:.1f} s)", file=out, flush=True
    )
    return result


def main(argv=None):
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # argparse's convention for a missing required argument: the usage, exit status 2.
        parser.print_help(sys.stderr)
        return 2
    try:
        run_compare(args)
    except (ValueError, TypeError) as exc:
        print(f"kernattn compare: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"kernattn compare: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"kernattn compare: error: cannot write the results: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kernattn compare: interrupted", file=sys.stderr)
        return 130
    return 0
