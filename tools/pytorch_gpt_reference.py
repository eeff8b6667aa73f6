"""The same training as `oobleck-run --single-process`, written the way a
PyTorch user writes it (nanoGPT style): one process, one module, the head
tied to the token embedding as one parameter (or, for a Llama-style profile,
the block as Hugging Face's Llama writes it, with its own head), gradients accumulated over the
step's microbatches in .grad, clip_grad_norm_ and torch.optim.AdamW. It is
the reference oobleck's own speed is measured against
(tools/bench-train-efficiency.sh).

  python3 tools/pytorch_gpt_reference.py --profile PROFILE.json --plan PLAN.json --data tokens.bin \\
      [--steps K] [--device cpu|cuda] [--attention plain|sdpa] [--compile] [--threads N] [--json OUT]
      [--kernel-table FILE]

The model, its initial weights and the data order are oobleck's
(tools/torchrun_gpt_ddp.py builds them), so step 0's loss equals
oobleck-run's. With a bf16 profile on CUDA the forward pass runs under
autocast in bf16 (fp32 weights and optimizer state), as oobleck-run does;
on CUDA, AdamW is PyTorch's fused one and attention is
F.scaled_dot_product_attention unless --attention plain. --compile wraps the
model in torch.compile (PyTorch 2). Prints one line per step and, with
--json, writes {"steps": [{"step", "loss", "step_ms"}], "tokens_per_step",
"threads", "device", "attention", "compiled", "torch"}. --kernel-table profiles
the last step with torch.profiler and writes its operators and kernels, the
costliest on the device first.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from torchrun_gpt_ddp import (CLIP_NORM, LEARNING_RATE, WEIGHT_DECAY, build_model, fail,  # noqa: E402
                              read_job, read_model_tokens, step_sequences)


def write_atomically(path, text):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, path)


def write_kernel_table(path, profiler, device):
    """The profiled step's operators and kernels, the costliest on the device first."""
    averages = profiler.key_averages()
    table = None
    keys = ("self_device_time_total", "self_cuda_time_total") if device == "cuda" else ("self_cpu_time_total",)
    for key in keys:
        try:
            table = averages.table(sort_by=key, row_limit=60)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    write_atomically(path, (table or averages.table(row_limit=60)) + "\n")


def main():
    parser = argparse.ArgumentParser(description="oobleck's GPT trained by plain PyTorch, one process")
    parser.add_argument("--profile", required=True, help="oobleck-profile output: the model and microbatch size")
    parser.add_argument("--plan", required=True, help="oobleck-plan output: the global microbatches per step")
    parser.add_argument("--data", required=True, help="little-endian uint16 tokens (oobleck-run tokenize)")
    parser.add_argument("--steps", type=int, default=5, help="steps to train (default: 5)")
    parser.add_argument("--seed", type=int, default=1, help="weights and data order, as oobleck-run --seed")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--attention", choices=("plain", "sdpa"), default=None,
                        help="default: sdpa on CUDA with PyTorch 2, plain otherwise")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default: 1)")
    parser.add_argument("--json", help="write the steps' times and losses here")
    parser.add_argument("--kernel-table", metavar="FILE",
                        help="profile the last step (torch.profiler) and write its operators and kernels, "
                             "by time on the device, to FILE")
    args = parser.parse_args()
    if args.steps < 1:
        fail("--steps must be at least 1")
    if args.threads < 1:
        fail("--threads must be at least 1")
    two = int(torch.__version__.split(".")[0]) >= 2
    attention = args.attention or ("sdpa" if args.device == "cuda" and two else "plain")
    if (attention == "sdpa" or args.compile) and not two:
        fail(f"--attention sdpa and --compile need PyTorch 2 (this is {torch.__version__})")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: PyTorch sees no CUDA GPU")

    job = read_job(args.profile, args.plan)
    vocab, seq_len, microbatch, microbatches = job.vocab, job.seq_len, job.microbatch, job.global_microbatches
    bf16 = args.device == "cuda" and job.dtype == "bf16"

    torch.set_num_threads(args.threads)
    tokens = read_model_tokens(args.data, seq_len, vocab)
    device = torch.device(args.device)
    model = build_model(job, args.seed, attention).to(device)
    fused = {"fused": True} if args.device == "cuda" and two else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, **fused)
    forward = torch.compile(model) if args.compile else model
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else None

    steps = []
    for step in range(args.steps):
        profiler = None
        if args.kernel_table and step == args.steps - 1:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if args.device == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            profiler = torch.profiler.profile(activities=activities)
            profiler.__enter__()
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        batches = [step_sequences(tokens, args.seed, step, m * microbatch, microbatch, seq_len)
                   for m in range(microbatches)]
        losses = []
        for inputs, targets in batches:
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            if autocast:
                with autocast():
                    logits = forward(inputs)
            else:
                logits = forward(inputs)
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), targets.reshape(-1)) / microbatches
            loss.backward()
            losses.append(loss.detach())
        nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        loss_value = float(torch.stack(losses).double().sum())  # waits for the device
        step_ms = (time.perf_counter() - began) * 1000
        if profiler is not None:
            profiler.__exit__(None, None, None)
            write_kernel_table(args.kernel_table, profiler, args.device)
        steps.append({"step": step, "loss": loss_value, "step_ms": step_ms})
        print(f"step {step:3d}  loss {loss_value:.6f}  {step_ms:.1f} ms", flush=True)
    if args.json:
        write_atomically(args.json, json.dumps({
            "steps": steps, "tokens_per_step": microbatches * microbatch * seq_len, "threads": args.threads,
            "device": args.device, "attention": attention, "compiled": args.compile, "bf16": bf16,
            "torch": torch.__version__}, indent=1) + "\n")


if __name__ == "__main__":
    main()
