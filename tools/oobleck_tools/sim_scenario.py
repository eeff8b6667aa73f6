"""An oobleck-sim scenario with the memory bandwidth a measured profile found.

For the machine the profile was measured on: the device memory bandwidth
(which streams the optimizer state) is the copy bandwidth oobleck-profile
measure found.

  oobleck-tools sim-scenario PROFILE.json OUT.json
"""
from .common import read_json, require, write_json


def add_arguments(parser):
    parser.add_argument("profile", metavar="PROFILE.json", help="oobleck-profile measure --out")
    parser.add_argument("out", metavar="OUT.json", help="the scenario, for oobleck-sim --scenario")


def run(args):
    profile = read_json(args.profile)
    measured = require(profile, "measured", args.profile, lambda v: isinstance(v, dict), "an object")
    copy = require(measured, "copy_bytes_per_s", f"{args.profile}: measured")
    write_json(args.out, {"cluster": {"device_memory_bytes_per_s": copy}})
    return 0
