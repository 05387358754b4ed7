"""The result of :func:`kernattn.compare`: a table with one row per (task, estimator)."""

import csv
import io
import json
import math
import os
import textwrap

import numpy as np

# The summary columns, in table order, and how each is parsed back from CSV.
COLUMNS = {
    "task": str,
    "estimator": str,
    "n_samples": int,
    "n_features": int,
    "n_splits": int,
    "mse_mean": float,
    "mse_std": float,
    "r2_mean": float,
    "r2_std": float,
    "fit_time": float,
    "predict_time": float,
    "n_warnings": int,
}

# The columns of a classification comparison: log-loss and accuracy in place of MSE and R².
CLASSIFICATION_COLUMNS = {
    **{key: COLUMNS[key] for key in ("task", "estimator", "n_samples", "n_features", "n_splits")},
    "log_loss_mean": float,
    "log_loss_std": float,
    "accuracy_mean": float,
    "accuracy_std": float,
    **{key: COLUMNS[key] for key in ("fit_time", "predict_time", "n_warnings")},
}

#: What :meth:`ComparisonResult.warnings_report` says when no pair warned or failed.
NO_WARNINGS = "No estimator warned or failed on any task."

# Per-split measurements kept alongside each row (JSON only).
_SPLIT_KEYS = ("mse", "r2", "fit_time", "predict_time")
_CLASSIFICATION_SPLIT_KEYS = ("log_loss", "accuracy", "fit_time", "predict_time")


def _columns(fields):
    """The columns of a table whose rows have ``fields``: classification or regression."""
    return CLASSIFICATION_COLUMNS if "log_loss_mean" in fields else COLUMNS


def _sig(value, digits=4):
    """``value`` to ``digits`` significant figures, without exponent for ordinary sizes."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if -4 <= magnitude < digits + 2:
        return f"{value:.{max(digits - 1 - magnitude, 0)}f}"
    return f"{value:.{digits - 1}e}"


def _seconds(value):
    if math.isnan(value):
        return "nan"
    return f"{value:.3f}" if value >= 1e-3 else f"{value:.1e}"


class ComparisonResult:
    """Held-out scores and timings of several estimators on several tasks.

    Made by :func:`kernattn.compare`. ``print(result)`` shows the aligned table; ``rows`` is a
    list of dicts with the columns below; ``splits`` holds the per-split measurements.

    Columns: ``task``, ``estimator``, ``n_samples``, ``n_features``, ``n_splits``,
    ``mse_mean``, ``mse_std``, ``r2_mean``, ``r2_std`` (over the splits), ``fit_time``,
    ``predict_time`` (mean seconds per split) and ``n_warnings`` (distinct warnings the
    estimator raised; the messages are in ``warnings``). A comparison of classifiers has
    ``log_loss_mean``, ``log_loss_std``, ``accuracy_mean`` and ``accuracy_std`` in place of
    the MSE and R² columns (``task_type`` says which). A pair that failed under
    ``compare(..., error_score=np.nan)`` has NaN scores and times, and its error messages in
    ``errors``.

    Parameters
    ----------
    rows : list of dict, optional
    settings : dict, optional
        How the comparison was run: ``cv`` (the splitter), ``n_repeats``, ``random_state``
        (the seed given), ``seeds`` (the seeds drawn from it for the tasks, the splitter and
        the estimators), ``n_jobs``.
    descriptions : dict of str to str, optional
        A one-line description per task.
    splits : dict, optional
        ``(task, estimator) -> {"mse": [...], "r2": [...], "fit_time": [...],
        "predict_time": [...]}``.
    warnings : dict, optional
        ``(task, estimator) -> list of distinct warning messages``.
    errors : dict, optional
        ``(task, estimator) -> list of distinct error messages``, for the pairs that failed.
    """

    def __init__(
        self,
        rows=None,
        *,
        settings=None,
        descriptions=None,
        splits=None,
        warnings=None,
        errors=None,
    ):
        self.rows = list(rows or [])
        self.settings = dict(settings or {})
        self.descriptions = dict(descriptions or {})
        self.splits = dict(splits or {})
        self.warnings = dict(warnings or {})
        self.errors = dict(errors or {})

    # ----------------------------------------------------------------- building

    def add(self, task, estimator, shape, scores):
        """Append the row summarizing per-split ``scores`` (dicts from one fit each: ``mse``
        and ``r2``, or ``log_loss`` and ``accuracy``, and the times)."""
        keys = _CLASSIFICATION_SPLIT_KEYS if "log_loss" in scores[0] else _SPLIT_KEYS
        per_split = {key: [s[key] for s in scores] for key in keys}
        messages = sorted({m for s in scores for m in s.get("warnings", [])})
        row = {
            "task": task,
            "estimator": estimator,
            "n_samples": int(shape[0]),
            "n_features": int(shape[1]),
            "n_splits": len(scores),
        }
        for key in keys[:2]:
            row[f"{key}_mean"] = float(np.mean(per_split[key]))
            row[f"{key}_std"] = float(np.std(per_split[key]))
        row |= {
            "fit_time": float(np.mean(per_split["fit_time"])),
            "predict_time": float(np.mean(per_split["predict_time"])),
            "n_warnings": len(messages),
        }
        self.rows.append(row)
        self.splits[(task, estimator)] = per_split
        self.warnings[(task, estimator)] = messages
        errors = sorted({s["error"] for s in scores if s.get("error")})
        if errors:
            self.errors[(task, estimator)] = errors
        return row

    # ------------------------------------------------------------------ reading

    @property
    def task_type(self):
        """``"classification"`` (log-loss and accuracy) or ``"regression"`` (MSE and R²)."""
        if self.rows and "log_loss_mean" in self.rows[0]:
            return "classification"
        return "regression"

    @property
    def tasks(self):
        """Task names, in the order they were run."""
        return list(dict.fromkeys(row["task"] for row in self.rows))

    @property
    def estimators(self):
        """Estimator names, in the order they were run."""
        return list(dict.fromkeys(row["estimator"] for row in self.rows))

    def get(self, task, estimator):
        """The row of one (task, estimator) pair."""
        for row in self.rows:
            if row["task"] == task and row["estimator"] == estimator:
                return row
        raise KeyError(f"no row for task {task!r} and estimator {estimator!r}")

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __repr__(self):
        return (
            f"<ComparisonResult: {len(self.rows)} rows, tasks {self.tasks}, "
            f"estimators {self.estimators}>"
        )

    def __str__(self):
        return self.to_string()

    # ----------------------------------------------------------------- printing

    def _cells(self, row):
        if self.task_type == "classification":
            scores = [_mean_std(row, "log_loss"), _mean_std(row, "accuracy")]
        else:
            mse = f"{_sig(row['mse_mean'])} ± {_sig(row['mse_std'], 2)}"
            scores = [_mean_std(row, "r2"), mse]
        times = [_seconds(row["fit_time"]), _seconds(row["predict_time"])]
        return [row["task"], row["estimator"], *scores, *times]

    def to_string(self):
        """The aligned table: held-out R² and MSE (mean ± std over splits), times in seconds;
        for classifiers, held-out log-loss and accuracy.

        Within each task the best R² (the lowest log-loss) is marked with ``*``.
        """
        if self.task_type == "classification":
            scores = ["log-loss (held out)", "accuracy (held out)"]
            key, sign, best_name = "log_loss_mean", -1.0, "log-loss"
        else:
            scores = ["R² (held out)", "MSE (held out)"]
            key, sign, best_name = "r2_mean", 1.0, "R²"
        header = ["task", "estimator", *scores, "fit s", "predict s"]
        best = {}
        for row in self.rows:
            # A failed pair (NaN) is never the best; NaN compares False with everything.
            if math.isnan(row[key]):
                continue
            if row["task"] not in best or sign * row[key] > sign * best[row["task"]][key]:
                best[row["task"]] = row
        body = []
        for row in self.rows:
            cells = self._cells(row)
            cells[2] += " *" if best.get(row["task"]) is row else "  "
            body.append(cells)
        widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
        left = {0, 1}

        def line(cells):
            return "  ".join(
                c.ljust(w) if i in left else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        rule = "  ".join("-" * w for w in widths)
        lines = [line(header), rule]
        previous = None
        for row, cells in zip(self.rows, body, strict=True):
            if previous is not None and row["task"] != previous:
                lines.append("")
            lines.append(line(cells))
            previous = row["task"]
        if self.settings.get("cv"):
            lines.append("")
            lines.append(f"splits: {self.settings['cv']}   * best {best_name} on the task")
            seed_line = self.seed_line()
            if seed_line:
                lines.append(seed_line)
        return "\n".join(lines)

    def seed_line(self):
        """One line saying the seed given and the seeds drawn from it (``""`` if unknown)."""
        seeds = self.settings.get("seeds") or {}
        seed = self.settings.get("random_state")
        drawn = []
        if seeds.get("tasks") is not None:
            drawn.append(f"tasks {seeds['tasks']}")
        if seeds.get("splits") is not None:
            drawn.append(f"splitter random_state={seeds['splits']}")
        if seeds.get("estimators") is not None:
            drawn.append(f"estimators random_state={seeds['estimators']}")
        if not drawn and seed is None:
            return ""
        given = f"seed {seed}" if seed is not None else "no integer seed (random_state=None)"
        return f"{given}; drawn from it: {', '.join(drawn)}" if drawn else given

    def warnings_report(self):
        """The distinct warning (and error) messages of every (task, estimator), as text.

        One block per pair that warned or failed, in table order; when none did, the one
        line ``"No estimator warned or failed on any task."``, so that
        ``print(result.warnings_report())`` always says something.
        """
        lines = []
        for row in self.rows:
            key = (row["task"], row["estimator"])
            messages = self.warnings.get(key, [])
            errors = self.errors.get(key, [])
            if not messages and not errors:
                continue
            lines.append(f"{row['task']} / {row['estimator']}:")
            for kind, texts in (("warning", messages), ("error", errors)):
                for text in texts:
                    lines.append(
                        textwrap.fill(
                            text,
                            width=100,
                            initial_indent=f"  {kind}: ",
                            subsequent_indent=" " * (len(kind) + 4),
                        )
                    )
        return "\n".join(lines) if lines else NO_WARNINGS

    def progress_line(self, row, index, total):
        """One line for a finished (task, estimator): ``[ 3/15] task  estimator  R² ...``."""
        width = len(str(total))
        note = f"  ({row['n_warnings']} warning{'s' * (row['n_warnings'] != 1)})"
        errors = self.errors.get((row["task"], row["estimator"]))
        if "log_loss_mean" in row:
            score = (
                f"log-loss {row['log_loss_mean']:6.3f} ± {row['log_loss_std']:.3f}   "
                f"accuracy {row['accuracy_mean']:.3f}   "
            )
        else:
            score = f"R² {row['r2_mean']:6.3f} ± {row['r2_std']:.3f}   "
        return (
            f"[{index:>{width}}/{total}] {row['task']:<12} {row['estimator']:<26} "
            + score
            + f"fit {_seconds(row['fit_time'])} s   predict {_seconds(row['predict_time'])} s"
            + (note if row["n_warnings"] else "")
            + (f"  failed: {errors[0]}" if errors else "")
        )

    # ------------------------------------------------------------- saving/loading

    def to_csv(self, path=None):
        """Write the summary rows as CSV (one header line, the columns in table order).

        Returns the text when ``path`` is None.
        """
        buffer = io.StringIO()
        columns = CLASSIFICATION_COLUMNS if self.task_type == "classification" else COLUMNS
        writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            # repr: the shortest text that reads back as the same float.
            writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
        return _write(buffer.getvalue(), path)

    def to_json(self, path=None):
        """Write everything (rows, per-split measurements, warnings, settings) as JSON.

        Returns the text when ``path`` is None.
        """
        import kernattn

        document = {
            "kernattn_version": kernattn.__version__,
            "settings": self.settings,
            "tasks": self.descriptions,
            "rows": [
                {
                    **row,
                    "splits": self.splits.get((row["task"], row["estimator"])),
                    "warnings": self.warnings.get((row["task"], row["estimator"]), []),
                    "errors": self.errors.get((row["task"], row["estimator"]), []),
                }
                for row in self.rows
            ],
        }
        return _write(json.dumps(document, indent=2, ensure_ascii=False) + "\n", path)

    @classmethod
    def from_csv(cls, path_or_text):
        """Read a table written by :meth:`to_csv` (a path, or the CSV text itself)."""
        text = _read(path_or_text)
        reader = csv.DictReader(io.StringIO(text))
        columns = _columns(reader.fieldnames or [])
        missing = set(columns) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"not a kernattn comparison CSV: missing columns {sorted(missing)}")
        rows = [{key: parse(raw[key]) for key, parse in columns.items()} for raw in reader]
        return cls(rows)

    @classmethod
    def from_json(cls, path_or_text):
        """Read a result written by :meth:`to_json` (a path, or the JSON text itself)."""
        document = json.loads(_read(path_or_text))
        if not isinstance(document, dict) or "rows" not in document:
            raise ValueError("not a kernattn comparison JSON: no 'rows'")
        rows, splits, warnings, errors = [], {}, {}, {}
        for raw in document["rows"]:
            columns = _columns(raw)
            missing = set(columns) - set(raw)
            if missing:
                raise ValueError(f"not a kernattn comparison JSON: missing {sorted(missing)}")
            row = {key: parse(raw[key]) for key, parse in columns.items()}
            rows.append(row)
            key = (row["task"], row["estimator"])
            if raw.get("splits") is not None:
                splits[key] = raw["splits"]
            warnings[key] = list(raw.get("warnings", []))
            if raw.get("errors"):
                errors[key] = list(raw["errors"])
        return cls(
            rows,
            settings=document.get("settings"),
            descriptions=document.get("tasks"),
            splits=splits,
            warnings=warnings,
            errors=errors,
        )

    def to_frame(self):
        """The summary rows as a pandas ``DataFrame``, the columns in table order.

        pandas is not a dependency of kernattn: this needs it installed.
        """
        try:
            import pandas
        except ImportError:
            raise ImportError(
                "ComparisonResult.to_frame needs pandas, which kernattn does not install: "
                "pip install pandas, or use result.rows, to_csv() or to_json()"
            ) from None
        columns = CLASSIFICATION_COLUMNS if self.task_type == "classification" else COLUMNS
        return pandas.DataFrame(self.rows, columns=list(columns))

    def plot(self, metric=None, ax=None):
        """Bar chart of ``metric`` per task and estimator (``None``: R², or the log-loss of
        classifiers); see :func:`kernattn.plotting.plot_comparison`."""
        from kernattn.plotting import plot_comparison

        return plot_comparison(self, metric=metric, ax=ax)


def _write(text, path):
    if path is None:
        return text
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return None


def _read(path_or_text):
    if isinstance(path_or_text, (str, os.PathLike)) and os.path.exists(path_or_text):
        with open(path_or_text, encoding="utf-8") as handle:
            return handle.read()
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        return path_or_text
    raise FileNotFoundError(f"no such file: {path_or_text!r}")


def _mean_std(row, metric):
    """A score's mean ± standard deviation over the splits, to three decimals."""
    return f"{row[metric + '_mean']:.3f} ± {row[metric + '_std']:.3f}"
