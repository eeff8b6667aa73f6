"""oobleck's helper tools: comparisons, checks, benchmarks and plots around
the oobleck-plan, oobleck-sim, oobleck-profile and oobleck-run programs.

Run through tools/oobleck-tools SUBCOMMAND ...; the subcommands live in
oobleck_tools.cli, one module each. Exit status: 0 when what is compared
agrees, 1 when it differs (or a check fails), 2 when it could not be compared
(bad input, a program that failed).
"""
