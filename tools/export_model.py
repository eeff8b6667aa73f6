"""Exports a PyTorch model, layer by layer, as oobleck trains one of its own:
one TorchScript file per layer and a manifest (`oobleck.torchscript-model.v1`)
with the layer order, what each layer owns and the shapes between layers.
`oobleck-profile measure --model DIR/manifest.json` profiles it and
`oobleck-run` trains it from that profile.

  python3 tools/export_model.py --module MODEL.py:BUILD --vocab V --seq-len S --out DIR [--seed N] [--name NAME]

BUILD() (called after torch.manual_seed(N)) returns an nn.Sequential, or any
module whose children in order are the layers: the first takes int64 token
ids [batch, seq], the last gives logits [batch, seq, vocab], each layer's
output is the next one's input (one tensor). Every layer is a pipeline layer:
the planner places whole layers on stages, so blocks of a transformer should
be layers of their own. From Python:

  from export_model import export_model
  export_model(model, "DIR", vocab=V, seq_len=S)

A weight shared by the first and the last layer (an embedding and its tied
LM head) is found by identity and written to the manifest as tied: oobleck
keeps the two copies equal, as one weight. No other layers may share one.
Layers are scripted (torch.jit.script), or traced on an example microbatch
where scripting fails. oobleck runs them in eval mode: no dropout.
Buffers are constants there (neither trained nor saved)."""
import argparse
import importlib.util
import json
import os
import sys

import torch
from torch import nn

FORMAT = "oobleck.torchscript-model.v1"


def fail(message):
    print(f"export_model: {message}", file=sys.stderr)
    sys.exit(2)


def load_builder(spec):
    """MODULE.py:FUNCTION -> the function."""
    path, _, name = spec.rpartition(":")
    if not path or not name:
        fail(f"--module {spec}: expected FILE.py:FUNCTION")
    if not os.path.isfile(path):
        fail(f"--module {spec}: {path}: no such file")
    loader = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        fail(f"--module {spec}: {path} defines no function {name}")
    return getattr(module, name)


def layers_of(model):
    layers = list(model.children()) if not isinstance(model, (list, tuple)) else list(model)
    if len(layers) < 3:
        fail(f"the model has {len(layers)} layers; oobleck needs at least 3 (an input layer, one more, an output layer)")
    return layers


def shape_of(tensor, batch, seq_len):
    """Sizes, with the microbatch's dimensions named."""
    shape = []
    for axis, size in enumerate(tensor.shape):
        if axis == 0 and size == batch:
            shape.append("batch")
        elif axis == 1 and size == seq_len:
            shape.append("seq")
        else:
            shape.append(int(size))
    return {"shape": shape, "dtype": {torch.int64: "int64", torch.float32: "float32"}.get(tensor.dtype,
                                                                                       str(tensor.dtype))}


def tied_pair(layers):
    """(first layer's name, last layer's name) of a weight the two share."""
    first = dict(layers[0].named_parameters())
    last = dict(layers[-1].named_parameters())
    pairs = [(a, b) for a, p in first.items() for b, q in last.items() if p is q]
    if len(pairs) > 1:
        fail(f"the first and last layers share {len(pairs)} weights; oobleck ties one")
    seen = {}
    for index, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            if id(p) in seen and not (seen[id(p)][0] == 0 and index == len(layers) - 1):
                fail(f"layers {seen[id(p)][0]} and {index} share a weight ({seen[id(p)][1]}, {name}): only the "
                     "first and the last layer may")
            seen.setdefault(id(p), (index, name))
    return pairs[0] if pairs else None


def export_model(model, out_dir, vocab, seq_len, name=None):
    """Writes OUT_DIR/layerN.pt and OUT_DIR/manifest.json; returns the manifest."""
    layers = layers_of(model)
    for layer in layers:
        layer.eval()
    os.makedirs(out_dir, exist_ok=True)
    batch = 3  # an odd size no layer width is likely to share
    x = torch.randint(vocab, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    tied = tied_pair(layers)
    entries = []
    with torch.no_grad():
        for index, layer in enumerate(layers):
            y = layer(x)
            if not isinstance(y, torch.Tensor):
                fail(f"layer {index} ({type(layer).__name__}) returns {type(y).__name__}; expected one tensor")
            try:
                scripted = torch.jit.script(layer)
            except Exception:  # noqa: BLE001 (any scripting failure: trace instead)
                scripted = torch.jit.trace(layer, x)
            file = f"layer{index}.pt"
            torch.jit.save(scripted, os.path.join(out_dir, file))
            owned = sum(p.numel() for p in layer.parameters())
            if tied and index == len(layers) - 1:
                owned -= dict(layer.named_parameters())[tied[1]].numel()
            entries.append({"file": file, "name": f"{index}-{type(layer).__name__.lower()}", "parameters": owned,
                            "input": shape_of(x, batch, seq_len), "output": shape_of(y, batch, seq_len)})
            x = y
    manifest = {"format": FORMAT, "name": name or os.path.basename(os.path.abspath(out_dir)), "vocab": vocab,
                "seq_len": seq_len, "layers": entries}
    if tied:
        manifest["tied"] = [{"layer": 0, "parameter": tied[0]}, {"layer": len(layers) - 1, "parameter": tied[1]}]
    path = os.path.join(out_dir, "manifest.json")
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=1) + "\n")
    os.replace(temporary, path)
    return manifest


def main():
    parser = argparse.ArgumentParser(description="export a PyTorch model layer by layer for oobleck")
    parser.add_argument("--module", required=True, help="FILE.py:FUNCTION that builds the model")
    parser.add_argument("--vocab", type=int, required=True, help="token ids are below this")
    parser.add_argument("--seq-len", type=int, required=True, help="tokens per sequence")
    parser.add_argument("--out", required=True, help="folder for the layer files and manifest.json")
    parser.add_argument("--seed", type=int, default=1, help="torch.manual_seed before building (default: 1)")
    parser.add_argument("--name", help="the model's name (default: the folder's)")
    args = parser.parse_args()
    if args.vocab < 2 or args.seq_len < 1:
        fail("--vocab must be at least 2 and --seq-len at least 1")
    torch.manual_seed(args.seed)
    model = load_builder(args.module)()
    if not isinstance(model, nn.Module) and not isinstance(model, (list, tuple)):
        fail(f"--module {args.module} returned {type(model).__name__}; expected an nn.Module")
    manifest = export_model(model, args.out, args.vocab, args.seq_len, args.name)
    print(f"Wrote {len(manifest['layers'])} layers and {os.path.join(args.out, 'manifest.json')}"
          + (" (first and last layer tied)" if "tied" in manifest else ""))


if __name__ == "__main__":
    main()
