"""A model of one's own trained by plain PyTorch in one process, as
`oobleck-run` trains its export: the same layers (built by the same
function, eager, in eval mode), the initial weights read from the exported
TorchScript files, step k's sequences drawn from the token file as oobleck
draws them, the mean token loss over the global batch (each microbatch's
mean divided by the global microbatches), global-norm clipping at 1 and
AdamW (learning rate 3e-3, weight decay 0.1), as oobleck-run's defaults.

  python3 tools/pytorch_own_model_reference.py --module MODEL.py:BUILD --manifest DIR/manifest.json \\
      --profile PROFILE.json --plan PLAN.json --data tokens.bin [--steps K] [--seed N] [--json OUT]

Prints one line per step and, with --json, writes {"steps": [{"step", "loss"}]}."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from export_model import layers_of, load_builder  # noqa: E402
from torchrun_gpt_ddp import (CLIP_NORM, LEARNING_RATE, WEIGHT_DECAY, positive_integer,  # noqa: E402
                              read_json, read_model_tokens, step_sequences)


def main():
    parser = argparse.ArgumentParser(description="an exported model trained by plain PyTorch, one process")
    parser.add_argument("--module", required=True, help="FILE.py:FUNCTION that builds the model")
    parser.add_argument("--manifest", required=True, help="tools/export_model.py's manifest: the initial weights")
    parser.add_argument("--profile", required=True, help="oobleck-profile output: the microbatch size")
    parser.add_argument("--plan", required=True, help="oobleck-plan output: the global microbatches per step")
    parser.add_argument("--data", required=True, help="little-endian uint16 tokens (oobleck-run tokenize)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1, help="data order, as oobleck-run --seed")
    parser.add_argument("--json", help="write the steps' losses here")
    args = parser.parse_args()
    manifest = read_json(args.manifest, "the manifest")
    vocab, seq_len = manifest["vocab"], manifest["seq_len"]
    microbatch = positive_integer(read_json(args.profile, "the profile"), "microbatch_size", args.profile)
    microbatches = positive_integer(read_json(args.plan, "the plan"), "global_microbatches", args.plan)
    torch.set_num_threads(1)

    model = load_builder(args.module)()
    layers = layers_of(model)
    folder = os.path.dirname(os.path.abspath(args.manifest))
    with torch.no_grad():
        for layer, entry in zip(layers, manifest["layers"]):
            exported = dict(torch.jit.load(os.path.join(folder, entry["file"])).named_parameters())
            for name, parameter in layer.named_parameters():
                parameter.copy_(exported[name])
    model = nn.Sequential(*layers) if not isinstance(model, nn.Module) else model
    model.eval()  # as oobleck runs the layers: no dropout
    parameters = list(model.parameters())  # a tied weight once
    optimizer = torch.optim.AdamW(parameters, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    tokens = read_model_tokens(args.data, seq_len, vocab)
    steps = []
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(microbatches):
            inputs, targets = step_sequences(tokens, args.seed, step, m * microbatch, microbatch, seq_len)
            x = inputs
            for layer in layers:
                x = layer(x)
            loss = F.cross_entropy(x.reshape(-1, vocab).float(), targets.reshape(-1)) / microbatches
            loss.backward()
            total += float(loss)
        nn.utils.clip_grad_norm_(parameters, CLIP_NORM)
        optimizer.step()
        steps.append({"step": step, "loss": total})
        print(f"step {step:3d}  loss {total:.6f}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(json.dumps({"steps": steps}, indent=1) + "\n")


if __name__ == "__main__":
    main()
