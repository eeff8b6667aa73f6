"""GPT training as users run it today: PyTorch DDP under torchrun's elastic
agent, with a checkpoint after every step. The baseline oobleck's live
recovery is compared with (tools/bench-vs-torchrun.sh).

  torchrun --standalone --nproc_per_node=6 --max_restarts=N --monitor_interval=S \
      tools/torchrun_gpt_ddp.py --profile PROFILE.json --plan PLAN.json --data tokens.bin --out DIR [--steps K]

The same job as oobleck-run trains from that profile and plan: the profile's
model (oobleck's GPT, executor/src/model/gpt.cpp: pre-norm blocks, causal
attention, tanh GELU, the head tied to the token embedding), its microbatch
size, the plan's global microbatches spread evenly over the processes, step
k's sequences drawn from the token file as oobleck draws them
(executor/src/model/data.cpp), the mean token loss over the global batch,
global-norm clipping at 1 and AdamW (learning rate 3e-3, weight decay 0.1).
The initial weights are oobleck's too: drawn from the same generator per
(seed, layer), in the same order. So step 0's loss equals oobleck-run
--single-process's (to 1e-7), and the first ten steps' agree within 1e-4
(gradients summed in float32 here, in float64 there). Gloo on CPU, one
thread per process.

Every step rank 0 saves a checkpoint (DIR/checkpoint.pt, written beside and
renamed, so a kill never leaves half of one) and appends a line to
DIR/metrics.jsonl:
  {"kind": "start", "restart": R, "launched": T, "imported": T, "ready": T, "resume_step": K}
      once per start of the workers: launched is when the process began
      (before importing torch), imported when torch is loaded, ready when
      the process group, the model and the checkpoint are in place;
  {"kind": "step", "step": K, "loss": L, "time": T, "step_ms": MS, "restart": R}
      after step K's checkpoint is saved.
Times are wall-clock seconds (time.time()); R is torchrun's restart count.
A started job resumes from DIR/checkpoint.pt when it is there. Every rank
writes its process id to DIR/pids/rank-N.json, so that a driver can kill
one during a step.
"""
import time

LAUNCHED = time.time()  # before the imports: loading torch is part of a restart's cost

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

IMPORTED = time.time()

LEARNING_RATE = 3e-3  # oobleck's TrainOptions defaults
WEIGHT_DECAY = 0.1
CLIP_NORM = 1.0
UINT64 = (1 << 64) - 1


def fail(message):
    print(f"torchrun_gpt_ddp: {message}", file=sys.stderr)
    sys.exit(2)


def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        fail(f"{path}: cannot read {what} ({error})")


def positive_integer(document, key, where):
    value = document.get(key) if isinstance(document, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        fail(f"{where}: \"{key}\" must be a positive integer")
    return value


def mix(z):
    """splitmix64's finaliser, as executor/src/model/data.cpp mixes."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & UINT64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & UINT64
    return z ^ (z >> 31)


def layer_generator(seed, index):
    """The generator oobleck draws layer INDEX's weights from
    (executor/src/model/gpt.cpp): seeded by (seed, index), mixed."""
    generator = torch.Generator()
    generator.manual_seed(mix((seed * 0x9E3779B97F4A7C15 + index + 0x632BE59BD9B4E019) & UINT64))
    return generator


class Block(nn.Module):
    def __init__(self, hidden, heads, layers, generator, attention="plain"):
        super().__init__()
        self.heads = heads
        self.attention = attention  # plain, or sdpa: F.scaled_dot_product_attention (PyTorch 2)
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.out = nn.Linear(4 * hidden, hidden)
        residual_std = 0.02 / math.sqrt(2 * layers)
        with torch.no_grad():
            for linear, std in ((self.qkv, 0.02), (self.proj, residual_std), (self.fc, 0.02), (self.out, residual_std)):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * std)
                linear.bias.zero_()

    def forward(self, x):
        batch, length, hidden = x.shape
        head_dim = hidden // self.heads
        qkv = self.qkv(self.ln1(x)).view(batch, length, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.attention == "sdpa":
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
            attended = torch.softmax(scores, -1) @ v
        attended = attended.permute(0, 2, 1, 3).reshape(batch, length, hidden)
        h = x + self.proj(attended)
        return h + self.out(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, seq_len, seed, attention="plain"):
        super().__init__()
        embedding = layer_generator(seed, 0)
        self.token = nn.Parameter(torch.randn(vocab, hidden, generator=embedding) * 0.02)
        self.position = nn.Parameter(torch.randn(seq_len, hidden, generator=embedding) * 0.01)
        self.blocks = nn.ModuleList(Block(hidden, heads, layers, layer_generator(seed, i + 1), attention)
                                    for i in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = F.embedding(tokens, self.token) + F.embedding(positions, self.position).unsqueeze(0)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.token.t()  # the head's weight is the token embedding


class RmsNorm(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        wide = x.float()
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LlamaBlock(nn.Module):
    """Llama's block as Hugging Face writes it: RMSNorm, rotary positions
    ("rotate half"), grouped-query attention, SwiGLU, no biases."""

    def __init__(self, hidden, heads, kv_heads, ffn_hidden, rope_theta, layers, generator, attention="plain"):
        super().__init__()
        self.attention = attention
        self.heads, self.kv_heads, self.head_dim, self.rope_theta = heads, kv_heads, hidden // heads, rope_theta
        kv = kv_heads * self.head_dim
        self.attention_norm, self.mlp_norm = RmsNorm(hidden), RmsNorm(hidden)
        self.wq = nn.Linear(hidden, hidden, bias=False)
        self.wk = nn.Linear(hidden, kv, bias=False)
        self.wv = nn.Linear(hidden, kv, bias=False)
        self.wo = nn.Linear(hidden, hidden, bias=False)
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)
        residual_std = 0.02 / math.sqrt(2 * layers)
        with torch.no_grad():  # oobleck's draws, in its order (executor/src/model/llama.cpp)
            for linear, std in ((self.wq, 0.02), (self.wk, 0.02), (self.wv, 0.02), (self.wo, residual_std),
                                (self.w1, 0.02), (self.w3, 0.02), (self.w2, residual_std)):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * std)

    def forward(self, x):
        batch, length, hidden = x.shape
        n = self.attention_norm(x)
        q = self.wq(n).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(n).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(n).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        frequencies = self.rope_theta ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)
        angles = torch.outer(torch.arange(length, dtype=torch.float64), frequencies)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.device, q.dtype), angles.sin().to(x.device, q.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        if self.attention == "sdpa":
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            attended = torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v
        h = x + self.wo(attended.transpose(1, 2).reshape(batch, length, hidden))
        m = self.mlp_norm(h)
        return h + self.w2(F.silu(self.w1(m)) * self.w3(m))


class Llama(nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, ffn_hidden, rope_theta, vocab, seed, attention="plain"):
        super().__init__()
        self.token = nn.Parameter(torch.randn(vocab, hidden, generator=layer_generator(seed, 0)) * 0.02)
        self.blocks = nn.ModuleList(
            LlamaBlock(hidden, heads, kv_heads, ffn_hidden, rope_theta, layers, layer_generator(seed, i + 1),
                       attention)
            for i in range(layers))
        self.norm = RmsNorm(hidden)
        self.output = nn.Parameter(torch.randn(vocab, hidden, generator=layer_generator(seed, layers + 1)) * 0.02)

    def forward(self, tokens):
        x = F.embedding(tokens, self.token)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.output.t()  # untied


def build_model(job, seed, attention="plain"):
    """The profile's model: oobleck's GPT-2-style one or its Llama-style one."""
    if job.architecture == "llama":
        return Llama(job.layers, job.hidden, job.heads, job.kv_heads, job.ffn_hidden, job.rope_theta, job.vocab,
                     seed, attention)
    return Gpt(job.layers, job.hidden, job.heads, job.vocab, job.seq_len, seed, attention)


def step_sequences(tokens, seed, step, first, count, seq_len):
    """Inputs and targets of samples FIRST..FIRST+COUNT-1 of step STEP: the
    windows oobleck's step_sequences picks."""
    windows = tokens.numel() - seq_len
    starts = [mix((mix((seed * 0x9E3779B97F4A7C15 + step) & UINT64) + j) & UINT64) % windows
              for j in range(first, first + count)]
    rows = torch.stack([tokens[s:s + seq_len + 1] for s in starts])
    return rows[:, :-1], rows[:, 1:]


def read_job(profile_path, plan_path):
    """The model (layers, hidden, heads, vocab, seq_len, dtype, and the
    architecture with its kv_heads, ffn_hidden and rope_theta), the
    microbatch size and the global microbatches of a profile and a plan."""
    profile = read_json(profile_path, "the profile")
    model = profile.get("model") if isinstance(profile, dict) else None
    where = f"{profile_path}: model"
    layers, hidden, heads, vocab, seq_len = (positive_integer(model, key, where)
                                             for key in ("layers", "hidden", "heads", "vocab", "seq_len"))
    if hidden % heads:
        fail(f"{where}: {heads} heads do not divide hidden = {hidden}")
    architecture = model.get("architecture", "gpt2")
    if architecture not in ("gpt2", "llama"):
        fail(f"{where}: architecture: expected gpt2 or llama, got {architecture!r}")
    llama = architecture == "llama"
    kv_heads = positive_integer(model, "kv_heads", where) if llama else heads
    ffn_hidden = positive_integer(model, "ffn_hidden", where) if llama else 4 * hidden
    rope_theta = model.get("rope_theta", 10000.0)
    if heads % kv_heads or not isinstance(rope_theta, (int, float)) or rope_theta <= 1:
        fail(f"{where}: kv_heads must divide heads and rope_theta be above 1")
    return argparse.Namespace(
        layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq_len=seq_len, dtype=model.get("dtype"),
        architecture=architecture, kv_heads=kv_heads, ffn_hidden=ffn_hidden, rope_theta=float(rope_theta),
        microbatch=positive_integer(profile, "microbatch_size", profile_path),
        global_microbatches=positive_integer(read_json(plan_path, "the plan"), "global_microbatches", plan_path))


def read_model_tokens(path, seq_len, vocab):
    """read_tokens, every token checked against the vocabulary."""
    tokens = read_tokens(path, seq_len)
    if int(tokens.max()) >= vocab:
        fail(f"{path}: token {int(tokens.max())} outside the model's vocabulary of {vocab}")
    return tokens


def read_tokens(path, seq_len):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        fail(f"{path}: cannot read the tokens ({error.strerror})")
    if len(data) % 2:
        fail(f"{path}: {len(data)} bytes; expected little-endian uint16 tokens (an even size)")
    if len(data) // 2 < seq_len + 2:
        fail(f"{path}: {len(data) // 2} tokens; expected at least seq_len + 2 = {seq_len + 2}")
    little = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(-1, 2).long()
    return little[:, 0] | (little[:, 1] << 8)


def append_line(path, line):
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_atomically(path, write):
    temporary = f"{path}.{os.getpid()}.tmp"
    write(temporary)
    os.replace(temporary, path)


def main():
    parser = argparse.ArgumentParser(description="GPT under DDP with a checkpoint every step (run by torchrun)")
    parser.add_argument("--profile", required=True, help="oobleck-profile output: the model and microbatch size")
    parser.add_argument("--plan", required=True, help="oobleck-plan output: the global microbatches per step")
    parser.add_argument("--data", required=True, help="little-endian uint16 tokens (oobleck-run tokenize)")
    parser.add_argument("--out", required=True, help="folder of the checkpoint, the metrics and the process ids")
    parser.add_argument("--steps", type=int, default=20, help="steps to train (default: 20)")
    parser.add_argument("--seed", type=int, default=1, help="weights and data order, as oobleck-run --seed "
                                                             "(default: 1)")
    args = parser.parse_args()
    if args.steps < 1:
        fail("--steps must be at least 1")
    if "RANK" not in os.environ:
        fail("run me under torchrun (RANK, WORLD_SIZE and the rendezvous come from it)")

    job = read_job(args.profile, args.plan)
    layers, hidden, heads, vocab, seq_len = job.layers, job.hidden, job.heads, job.vocab, job.seq_len
    microbatch, global_microbatches = job.microbatch, job.global_microbatches

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if global_microbatches % world:
        fail(f"{args.plan}: {global_microbatches} global microbatches do not split evenly over {world} processes")
    local_microbatches = global_microbatches // world
    tokens = read_model_tokens(args.data, seq_len, vocab)

    checkpoint_path = os.path.join(args.out, "checkpoint.pt")
    metrics_path = os.path.join(args.out, "metrics.jsonl")
    pid_folder = os.path.join(args.out, "pids")
    os.makedirs(pid_folder, exist_ok=True)

    model = build_model(job, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    first_step = 0
    if os.path.exists(checkpoint_path):
        state = torch.load(checkpoint_path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_step = state["step"] + 1
    ddp = DistributedDataParallel(model)

    write_atomically(os.path.join(pid_folder, f"rank-{rank}.json"),
                     lambda p: write_text(p, json.dumps({"pid": os.getpid(), "restart": restart})))
    if rank == 0:
        append_line(metrics_path, {"kind": "start", "restart": restart, "launched": LAUNCHED, "imported": IMPORTED,
                                   "ready": time.time(),
                                   "resume_step": first_step})

    for step in range(first_step, args.steps):
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros(())
        for m in range(local_microbatches):
            first = (rank * local_microbatches + m) * microbatch
            inputs, targets = step_sequences(tokens, args.seed, step, first, microbatch, seq_len)
            last = m == local_microbatches - 1
            # Gradients are all-reduced once, with the last microbatch's backward.
            with contextlib.nullcontext() if last else ddp.no_sync():
                logits = ddp(inputs)
                loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)) / local_microbatches
                loss.backward()
            loss_sum += loss.detach()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        dist.all_reduce(loss_sum)
        if rank == 0:
            write_atomically(checkpoint_path, lambda p: torch.save(
                {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, p))
            append_line(metrics_path, {"kind": "step", "step": step, "loss": loss_sum.item() / world,
                                       "time": time.time(), "step_ms": (time.perf_counter() - began) * 1000,
                                       "restart": restart})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
