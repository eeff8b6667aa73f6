"""The oobleck-tools command line: one subcommand per module of this package.

  tools/oobleck-tools SUBCOMMAND [ARGS...]     tools/oobleck-tools SUBCOMMAND --help

Each subcommand module has a docstring (its first line is the subcommand's
summary), add_arguments(parser) and run(args) -> exit status. Exit status:
0 when what is compared agrees, 1 when it differs or a check fails, 2 when it
could not be compared (bad input, a program that failed).
"""
import argparse
import importlib
import sys

from .common import InputError, ProgramError

# Subcommand name -> module. Every module is imported to build the parser;
# none imports matplotlib before its run(), so only plots need it.
SUBCOMMANDS = {
    "compare-losses": "compare_losses",
    "plot-live": "plot_live",
    "soak-check": "soak_check",
    "bench-recovery": "bench_recovery",
    "bench-torchrun": "bench_torchrun",
    "compare-run-sim": "compare_run_sim",
    "run-vs-sim": "run_vs_sim",
    "sim-scenario": "sim_scenario",
    "memory-budget": "memory_budget",
    "gpu-report": "gpu_report",
    "plot-gpu-profiles": "plot_gpu_profiles",
    "compare-replays": "compare_replays",
    "step-times": "step_times",
    "bench-compare": "bench_compare",
    "bench-history": "bench_history",
    "train-efficiency": "train_efficiency",
    "plan-vs-sim": "plan_vs_sim",
}


def load(name):
    return importlib.import_module(f"{__package__}.{SUBCOMMANDS[name]}")


def parser():
    top = argparse.ArgumentParser(
        prog="oobleck-tools", description="oobleck's helper tools: comparisons, checks, benchmarks and plots.",
        epilog="Exit status: 0 agrees, 1 differs or a check failed, 2 bad input or a program failed.")
    subparsers = top.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for name in SUBCOMMANDS:
        module = load(name)
        summary = module.__doc__.strip().splitlines()[0]
        sub = subparsers.add_parser(name, help=summary, description=module.__doc__.strip(),
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return top


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    # A subcommand that launches a program takes that program's options
    # after "--", untouched by argparse.
    passed = []
    if argv and argv[0] in SUBCOMMANDS and getattr(load(argv[0]), "PASSES_ARGUMENTS", False) and "--" in argv:
        cut = argv.index("--")
        argv, passed = argv[:cut], argv[cut + 1:]
    args = parser().parse_args(argv)
    args.passed = passed
    try:
        return args.run(args)
    except (InputError, ProgramError) as error:
        print(f"oobleck-tools {args.subcommand}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
