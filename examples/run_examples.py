"""Run the examples and hold them to the run times their headers state.

Every example's header states, in one line, how long it runs on two cores at full size and
at the test sizes (``KERNATTN_SMOKE=1``)::

    **Run time.** About 25 s on 2 cores (3 s with ``KERNATTN_SMOKE=1``).

This script runs the examples named on the command line (all of them by default), each in a
fresh Python process that writes its figures to a temporary folder, and prints the measured
wall time beside the stated one. It exits with status 1 if an example fails, states no run
time, or takes more than ``--factor`` (3) times the time its header states for the sizes it
ran at; an example is stopped at that limit. ::

    python examples/run_examples.py                    # every example at full size
    python examples/run_examples.py --smoke 17 18 19   # three of them at the test sizes

An example that needs an optional dependency that is missing (torch for 17–19) is skipped
with a note. ``tests/test_examples.py`` checks the test sizes' times with the same functions.
"""

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time

try:
    import resource
except ImportError:  # not on Windows
    resource = None

EXAMPLES = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(EXAMPLES)
#: How many times its stated run time an example may take before it counts as too slow.
FACTOR = 3.0
#: The examples that need an optional dependency, and which.
OPTIONAL = {
    "17_induction_heads.py": "torch",
    "18_in_context_regression.py": "torch",
    "19_scale_on_a_token_model.py": "torch",
}
_RUN_TIME = re.compile(
    r"\*\*Run time\.\*\*\s+About\s+(?P<full>\d+(?:\.\d+)?)\s*(?P<unit>s|min)\s+on\s+2\s+cores"
    r"\s+\((?P<smoke>\d+(?:\.\d+)?)\s*s\s+with\s+``KERNATTN_SMOKE=1``\)"
)


def example_scripts():
    """The file names of the examples (``01_*.py`` … ``19_*.py``), in order."""
    names = os.listdir(EXAMPLES)
    return sorted(n for n in names if re.fullmatch(r"\d\d_\w+\.py", n))


def stated_seconds(script, smoke=False):
    """The run time (s) that the header of ``script`` states, at full size or, with
    ``smoke``, at the test sizes; ``None`` if the header states none."""
    with open(os.path.join(EXAMPLES, script), encoding="utf-8") as handle:
        match = _RUN_TIME.search(handle.read())
    if match is None:
        return None
    if smoke:
        return float(match["smoke"])
    return float(match["full"]) * (60.0 if match["unit"] == "min" else 1.0)


def missing_dependency(script):
    """The optional module ``script`` needs and that is not installed, or ``None``."""
    module = OPTIONAL.get(script)
    if module is not None and importlib.util.find_spec(module) is None:
        return module
    return None


def run_example(script, out, smoke=False, timeout=None):
    """Run ``script`` with its figures sent to ``out``; the finished process (``returncode``
    −9 if stopped after ``timeout`` seconds), the wall time and the processor time of the
    process (user and system, all threads; None where unknown), in seconds."""
    env = dict(
        os.environ,
        MPLBACKEND="Agg",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("KERNATTN_SMOKE", None)
    if smoke:
        env["KERNATTN_SMOKE"] = "1"
    command = [sys.executable, os.path.join(EXAMPLES, script), "--out", str(out)]
    used = _children_cpu()
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=out, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:
        done = subprocess.CompletedProcess(
            command, -9, _text(expired.stdout), _text(expired.stderr)
        )
    seconds = time.perf_counter() - start
    cpu = None if used is None else _children_cpu() - used
    return done, seconds, cpu


def _children_cpu():
    """Processor seconds of the finished child processes so far (None where unknown)."""
    if resource is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def available_cores():
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_average():
    """The machine's load average over the last minute (None where unknown)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _text(output):
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def check_example(script, smoke=False, factor=FACTOR):
    """Run ``script`` once; a line of the report and whether it passed."""
    stated = stated_seconds(script, smoke)
    limit = None if stated is None else factor * stated
    with tempfile.TemporaryDirectory() as out:
        done, seconds, cpu = run_example(script, out, smoke, timeout=limit)
    if done.returncode == -9:
        return f"{script}: stopped after {seconds:.1f} s, over {factor:g} × {stated:g} s", False
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        return f"{script}: failed in {seconds:.1f} s\n{tail}", False
    if stated is None:
        busy = "" if cpu is None else f" (processor {cpu:.1f} s)"
        return f"{script}: {seconds:.1f} s{busy}, but its header states no run time", False
    passed = seconds <= limit
    verdict = "ok" if passed else f"TOO SLOW (more than {factor:g} × stated)"
    # The processor time and the load show a busy machine: wall time far above the
    # processor time per core in use.
    busy = "" if cpu is None else f", processor {cpu:.1f} s"
    load = load_average()
    busy += "" if load is None else f", load {load:.1f} on {available_cores()} cores"
    return f"{script}: {seconds:6.1f} s (stated {stated:g} s{busy})  {verdict}", passed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "examples",
        nargs="*",
        help="examples to run, by number or file name (default: all)",
    )
    parser.add_argument("--smoke", action="store_true", help="the test sizes (KERNATTN_SMOKE=1)")
    parser.add_argument(
        "--factor",
        type=float,
        default=FACTOR,
        help=f"allowed multiple of the stated time (default: {FACTOR:g})",
    )
    args = parser.parse_args(argv)
    scripts = example_scripts()
    if args.examples:
        chosen = []
        for name in args.examples:
            prefix = f"{int(name):02d}_" if name.isdigit() else name
            matches = [s for s in scripts if s == name or s.startswith(prefix)]
            if not matches:
                parser.error(f"no example {name!r}; choose from {', '.join(scripts)}")
            chosen += matches
        scripts = chosen
    failed = []
    for script in scripts:
        missing = missing_dependency(script)
        if missing is not None:
            print(f"{script}: skipped ({missing} is not installed)", flush=True)
            continue
        line, passed = check_example(script, args.smoke, args.factor)
        print(line, flush=True)
        if not passed:
            failed.append(script)
    if failed:
        print(f"{len(failed)} example(s) failed or ran too long: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
