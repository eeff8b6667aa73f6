"""Shared by the subcommands: reading JSON and oobleck-run metrics files with
errors that name the file, line and field; writing outputs atomically;
running oobleck's programs; relative differences.

  from oobleck_tools.common import read_metrics
  metrics = read_metrics("build/live/metrics.jsonl", step_fields=("step", "loss"))
  metrics.steps, metrics.reconfigurations, metrics.no_plans, metrics.header
"""
import contextlib
import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
METRICS_FORMAT = "oobleck.metrics.v1"


class InputError(Exception):
    """Input that cannot be used: a missing file, a malformed line, a missing
    field. The message names the file (and line or field) and is shown as is;
    the subcommand exits 2."""


class ProgramError(Exception):
    """One of oobleck's programs failed; the subcommand exits 2."""


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _node_list(value):
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


# What each field of a metrics line must hold: (check, description).
FIELD_TYPES = {
    "step": (_integer, "an integer"),
    "loss": (_number, "a number"),
    "samples": (_integer, "an integer"),
    "step_samples": (_integer, "an integer"),
    "iteration_ms": (_number, "a number"),
    "elapsed_ms": (_number, "a number"),
    "generation": (_integer, "an integer"),
    "lost": (_node_list, "a list of node names"),
    "added": (_node_list, "a list of node names"),
    "reasons": (lambda v: isinstance(v, dict), "an object"),
    "resume_step": (_integer, "an integer"),
    "pipelines": (lambda v: isinstance(v, str), "a string"),
    "detect_ms": (_number, "a number"),
    "plan_ms": (_number, "a number"),
    "communicators_ms": (_number, "a number"),
    "copy_ms": (_number, "a number"),
    "copy_bytes": (_number, "a number"),
    "resume_ms": (_number, "a number"),
    "recovery_ms": (_number, "a number"),
    "superseded": (lambda v: isinstance(v, bool), "true or false"),
}

# The fields a reader needs by default: a step's number and loss (the
# single-process reference writes only step, loss, samples, iteration_ms),
# and every reconfiguration field the subcommands read.
STEP_FIELDS = ("step", "loss")
RECONFIGURATION_FIELDS = ("generation", "lost", "added", "resume_step", "detect_ms", "plan_ms", "communicators_ms",
                          "copy_ms", "resume_ms", "recovery_ms", "superseded")


@dataclass
class Metrics:
    """The lines of one metrics file, sorted by kind, in file order."""
    path: str
    header: dict | None = None
    steps: list = field(default_factory=list)
    reconfigurations: list = field(default_factory=list)
    no_plans: list = field(default_factory=list)

    def established(self):
        """Reconfigurations that trained (not replaced by a newer one first)."""
        return [r for r in self.reconfigurations if not r["superseded"]]


def _open_text(path):
    try:
        return open(path, encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read it ({error.strerror})") from None


def read_json(path):
    """The JSON document in PATH; InputError when missing or malformed."""
    with _open_text(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{error.lineno}: malformed JSON ({error.msg})") from None
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text") from None


def require(doc, key, where, check=_number, description="a number"):
    """doc[key], checked; InputError naming WHERE and the field otherwise."""
    if not isinstance(doc, dict) or key not in doc:
        raise InputError(f"{where}: no \"{key}\" field")
    if not check(doc[key]):
        raise InputError(f"{where}: \"{key}\" is not {description}")
    return doc[key]


def read_json_lines(path):
    """(line number, object) for every non-blank line of a JSON-lines file."""
    with _open_text(path) as f:
        try:
            lines = f.readlines()
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text") from None
    out = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{number}: malformed JSON ({error.msg})") from None
        if not isinstance(value, dict):
            raise InputError(f"{path}:{number}: not a JSON object")
        out.append((number, value))
    return out


def _check_fields(line, fields, where):
    for name in fields:
        check, description = FIELD_TYPES[name]
        require(line, name, where, check, description)


def parse_metrics_line(path, number, line, metrics, step_fields, reconfiguration_fields):
    """Files one parsed metrics line into METRICS by its kind; unknown kinds
    are skipped, so newer writers can add kinds."""
    where = f"{path}:{number}"
    kind = line.get("kind")
    if kind is None:
        raise InputError(f"{where}: no \"kind\" field (every line of an {METRICS_FORMAT} metrics file has one)")
    if not isinstance(kind, str):
        raise InputError(f"{where}: \"kind\" is not a string")
    if kind == "run":
        form = line.get("format")
        if form is not None and form != METRICS_FORMAT:
            raise InputError(f"{where}: format {form!r}, expected {METRICS_FORMAT}")
        if metrics.header is None:
            metrics.header = line
    elif kind == "step":
        _check_fields(line, step_fields, where)
        metrics.steps.append(line)
    elif kind == "reconfiguration":
        _check_fields(line, reconfiguration_fields, where)
        metrics.reconfigurations.append(line)
    elif kind == "no_plan":
        metrics.no_plans.append(line)


def read_metrics(path, step_fields=STEP_FIELDS, reconfiguration_fields=RECONFIGURATION_FIELDS):
    """The lines of an oobleck-run --metrics file (or a --single-process one),
    selected by their "kind": "run" (header), "step", "reconfiguration" and
    "no_plan"; lines of other kinds are ignored. Step and reconfiguration
    lines must carry the fields asked for, of the right type."""
    metrics = Metrics(path=str(path))
    for number, line in read_json_lines(path):
        parse_metrics_line(path, number, line, metrics, step_fields, reconfiguration_fields)
    return metrics


def relative_difference(value, reference):
    """|value - reference| / |reference|; 0 when both are 0, infinite when
    only the reference is."""
    if reference == 0:
        return 0.0 if value == 0 else math.inf
    return abs(value - reference) / abs(reference)


def add_measured_iteration_options(parser, what="|predicted / measured - 1|"):
    """--skip and --max-error, for the subcommands that put a measured
    iteration beside a prediction."""
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the measured median "
                                                            "(default: %(default)s)")
    parser.add_argument("--max-error", type=float, metavar="R",
                        help=f"exit 1 when {what} exceeds R (default: no check)")


def relative_error(predicted, measured):
    """predicted / measured - 1 (signed); infinite for a zero measurement."""
    if measured == 0:
        return 0.0 if predicted == 0 else math.inf
    return predicted / measured - 1


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path):
    """Yields a temporary path beside PATH; renamed to PATH when the block
    ends normally, removed otherwise, so PATH is never half-written. Through
    a symbolic link the file it points at is replaced, the link kept; a
    device, pipe or socket (/dev/null, /dev/stdout) is written in place, not
    replaced."""
    path = os.fspath(path)
    special = os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path)
    if os.path.islink(path) and os.path.isfile(path):
        path = os.path.realpath(path)
    folder = tempfile.gettempdir() if special else os.path.dirname(path) or "."
    try:
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except FileNotFoundError:
        raise InputError(f"{path}: its folder {folder} does not exist") from None
    except OSError as error:
        raise InputError(f"{path}: cannot write there ({error.strerror})") from None
    os.close(descriptor)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # as open() would create it; mkstemp makes it private
        yield temporary
        if special:
            with open(temporary, "rb") as source, open(path, "wb") as target:
                shutil.copyfileobj(source, target)
            os.remove(temporary)
        else:
            os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise


def write_text(path, text):
    with atomic_output(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)


def write_json(path, value):
    write_text(path, json.dumps(value, indent=2) + "\n")


def copy_file(source, path):
    """Copies SOURCE to PATH atomically."""
    with atomic_output(path) as temporary:
        shutil.copyfile(source, temporary)


def run_program(*args, cwd=None):
    """Runs one of oobleck's programs; ProgramError with its stderr when it
    fails or cannot start."""
    try:
        result = subprocess.run([os.fspath(a) for a in args], capture_output=True, text=True, cwd=cwd)
    except OSError as error:
        raise ProgramError(f"cannot run {args[0]}: {error.strerror}") from None
    if result.returncode != 0:
        raise ProgramError(f"{' '.join(map(os.fspath, args))} failed (exit {result.returncode}):\n"
                           f"{result.stderr.rstrip()}")
    return result


def import_pyplot(subcommand):
    """matplotlib's pyplot, headless; imported only by the plotting
    subcommands, so the others run without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise InputError(f"{subcommand} needs matplotlib, which this Python lacks (Debian: python3-matplotlib, "
                         "as tools/setup.sh installs; run it with /usr/bin/python3)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    return pyplot


def save_figure(figure, path):
    """Saves a matplotlib figure atomically, in the format PATH's suffix names."""
    suffix = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "svg"
    with atomic_output(path) as temporary:
        try:
            figure.savefig(temporary, format=suffix)
        except ValueError as error:
            raise InputError(f"{path}: cannot write a plot in this format ({error})") from None
