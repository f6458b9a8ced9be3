#!/usr/bin/env python3
"""PyTorch-eager reference of the engine's training step (bench/cpu; not a test).

The same math as engine/core/model.cpp + trainer.cpp, written the way a PyTorch user
would (Hugging Face Llama "eager" attention): RMSNorm in fp32, RoPE with rotate_half,
GQA by repeat_interleave of kv heads, causal softmax attention, SwiGLU MLP, no biases,
loss = sum of token cross-entropies / valid tokens, global-norm clipping, AdamW
(train.adam_beta1/2, adam_epsilon; weight decay on matrices only) with get_scheduler's schedule.
Data: the engine's deterministic batches (make_batch in engine/core/data.cpp: splitmix64
offsets into the byte-level text / token file), so step s sees the same tokens.

  eager_step.py --config resources/configs/tiny.json [--set train.seq_length=1024]...
                [--init DIR] [--write-init DIR] [--steps 8] [--threads T]

--write-init DIR writes a seeded random init as DIR/model.safetensors + config.json (HF
names) and exits; the engine loads it with --set train.init_from=DIR and this script with
--init DIR, so both start from the same weights. Prints one JSON line per step:
{"step", "loss", "step_ms", "grad_norm"}.
sp > 1: run one process per rank with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set
(compare_eager.py does); torch.distributed Gloo, DeepSpeed-Ulysses style: each rank holds
N/P tokens, q/k/v go seq->head by all_to_all_single (an autograd function), attention runs
over all N tokens for H/P heads, head->seq back; gradients, loss sum and token count are
summed over ranks in one all_reduce. Debian's torch 1.13 runs it with the engine's libtorch.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def load_config(path, sets):
    with open(path) as f:
        cfg = json.load(f)
    for s in sets:
        key, val = s.split("=", 1)
        try:
            v = json.loads(val)
        except json.JSONDecodeError:
            v = val
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return cfg


class Tokens:
    """Byte-level text (width 1) or flat uint16/uint32 token file, as data.cpp reads them."""

    def __init__(self, data, root):
        path = data["path"] if os.path.isabs(data["path"]) else os.path.join(root, data["path"])
        kind = data.get("kind", "text")
        if kind == "text":
            dtype = torch.uint8
        elif kind == "tokens":
            dtype = torch.int32 if data.get("token_dtype", "uint16") == "uint32" else torch.int16
        else:
            raise SystemExit(f"eager_step.py: data.kind '{kind}' is not supported here (text or tokens)")
        raw = open(path, "rb").read()
        t = torch.frombuffer(bytearray(raw), dtype=dtype).to(torch.int64)
        if dtype == torch.int16:
            t = t & 0xFFFF
        self.t = t

    def batch(self, N, step, first, count, seed):
        span = self.t.numel() - (N + 1) + 1
        ids, labels = [], []
        for b in range(count):
            key = splitmix64(((seed * 0x100000001B3) & M64) ^ splitmix64((step * 1000003 + first + b) & M64))
            off = key % span
            ids.append(self.t[off:off + N])
            labels.append(self.t[off + 1:off + N + 1])
        return torch.stack(ids), torch.stack(labels)  # (B, N) int64 each


def param_shapes(m):
    d, ff, dh = m["hidden_size"], m["intermediate_size"], m["hidden_size"] // m["num_attention_heads"]
    H, Hkv = m["num_attention_heads"], m.get("num_key_value_heads", m["num_attention_heads"])
    shapes = [("model.embed_tokens.weight", (m["vocab_size"], d))]
    for l in range(m["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes += [(p + "self_attn.q_proj.weight", (H * dh, d)), (p + "self_attn.k_proj.weight", (Hkv * dh, d)),
                   (p + "self_attn.v_proj.weight", (Hkv * dh, d)), (p + "self_attn.o_proj.weight", (d, H * dh)),
                   (p + "mlp.gate_proj.weight", (ff, d)), (p + "mlp.up_proj.weight", (ff, d)),
                   (p + "mlp.down_proj.weight", (d, ff)), (p + "input_layernorm.weight", (d,)),
                   (p + "post_attention_layernorm.weight", (d,))]
    shapes.append(("model.norm.weight", (d,)))
    if not m.get("tie_word_embeddings", False):
        shapes.append(("lm_head.weight", (m["vocab_size"], d)))
    return shapes


def write_init(m, seed, out_dir):
    """Seeded init as the engine does it (norms 1, matrices N(0, 0.02)), saved as safetensors."""
    g = torch.Generator().manual_seed(seed)
    tensors = []
    for name, shape in param_shapes(m):
        t = torch.ones(shape) if len(shape) == 1 else torch.empty(shape).normal_(0.0, 0.02, generator=g)
        tensors.append((name, t.contiguous()))
    header, off = {}, 0
    for name, t in tensors:
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, t in tensors:
            f.write(t.numpy().tobytes())
    hf = dict(m)
    hf.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "attention_bias": False,
               "rope_scaling": None, "torch_dtype": "float32"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf, f, indent=1)


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"eager_step.py: {path}: {name} is {info['dtype']}, only F32 is read here")
        a, b = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.float32).reshape(info["shape"]).clone()
    return out


class AllToAll(torch.autograd.Function):
    """Equal-split all_to_all_single over dim 0 (P chunks); its own transpose in backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        out = torch.empty_like(x)  # after contiguous(): empty_like keeps a non-contiguous input's strides
        dist.all_to_all_single(out, x)
        return out

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        out = torch.empty_like(g)
        dist.all_to_all_single(out, g)
        return out


def seq_to_head(q, k, v, P):  # (B, n, Hx, dh) each -> (B, n*P, Hx/P, dh): all tokens, this rank's heads
    # One all-to-all for q, k and v together: separate ones would let autograd run their
    # backward all-to-alls in a different order on different ranks (k and v have the same
    # shape, so Gloo would silently swap their gradients).
    B, n, _, dh = q.shape
    hs = [x.shape[2] // P for x in (q, k, v)]
    x = torch.cat([x.reshape(B, n, P, h, dh) for x, h in zip((q, k, v), hs)], dim=3)  # (B, n, P, sum h, dh)
    y = AllToAll.apply(x.permute(2, 0, 1, 3, 4).contiguous())  # (P, B, n, sum h, dh), dim 0 = source rank
    y = y.permute(1, 0, 2, 3, 4).reshape(B, P * n, sum(hs), dh)
    return y.split(hs, dim=2)


def head_to_seq(a, P):  # (B, N, h, dh) -> (B, N/P, h*P, dh): this rank's tokens, all heads
    B, N, h, dh = a.shape
    y = AllToAll.apply(a.reshape(B, P, N // P, h, dh).permute(1, 0, 2, 3, 4).contiguous())  # (P, B, n, h, dh), dim 0 = head group
    return y.permute(1, 2, 0, 3, 4).reshape(B, N // P, P * h, dh)


def rms_norm(x, w, eps):
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return w * x32.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward_loss_sum(P, m, ids, labels, pos0=0, sp=1):
    B, n = ids.shape
    H, Hkv = m["num_attention_heads"], m.get("num_key_value_heads", m["num_attention_heads"])
    d = m["hidden_size"]
    dh, eps = d // H, m["rms_norm_eps"]
    N = n * sp
    inv_freq = 1.0 / (m["rope_theta"] ** (torch.arange(0, dh, 2).float() / dh))
    freqs = torch.arange(pos0, pos0 + n).float()[:, None] * inv_freq[None, :]  # global positions of this shard
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, :, None], emb.sin()[None, :, None]  # (1, n, 1, dh)
    mask = torch.full((N, N), float("-inf")).triu(1)
    x = F.embedding(ids, P["model.embed_tokens.weight"])  # (B, n, d)
    for l in range(m["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = F.linear(h, P[p + "self_attn.q_proj.weight"]).view(B, n, H, dh)  # (B, n, H, dh)
        k = F.linear(h, P[p + "self_attn.k_proj.weight"]).view(B, n, Hkv, dh)  # (B, n, Hkv, dh)
        v = F.linear(h, P[p + "self_attn.v_proj.weight"]).view(B, n, Hkv, dh)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if Hkv < sp:  # fewer kv heads than ranks: replicate so each rank gets one
            k, v = k.repeat_interleave(sp // Hkv, dim=2), v.repeat_interleave(sp // Hkv, dim=2)
        if sp > 1:
            q, k, v = seq_to_head(q, k, v, sp)  # (B, N, heads/P, dh)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, h, N, dh)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # (B, h, N, dh)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(dh) + mask  # (B, h, N, N)
        a = torch.matmul(F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), v).transpose(1, 2)  # (B, N, h, dh)
        if sp > 1:
            a = head_to_seq(a, sp)  # (B, n, H, dh)
        x = x + F.linear(a.reshape(B, n, H * dh), P[p + "self_attn.o_proj.weight"])
        h2 = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        x = x + F.linear(F.silu(F.linear(h2, P[p + "mlp.gate_proj.weight"])) * F.linear(h2, P[p + "mlp.up_proj.weight"]),
                         P[p + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if m.get("tie_word_embeddings", False) else P["lm_head.weight"]
    logits = F.linear(x, head)  # (B, n, V)
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum")


def learning_rate(t, s):
    # transformers' get_scheduler lambdas (engine/core/trainer.cpp learning_rate, issue 14)
    W, T, kind = t.get("warmup_steps", 0), t["steps"], t.get("lr_scheduler_type", "cosine_with_min_lr")
    if s < W:
        return t["lr"] * s / max(1, W)
    if kind == "constant_with_warmup":
        return t["lr"]
    if kind == "linear":
        return t["lr"] * max(0.0, (T - s) / max(1, T - W))
    factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * (s - W) / max(1, T - W)))
    if kind == "cosine_with_min_lr":
        rate = t.get("min_lr", 0.0) / t["lr"]
        factor = factor * (1 - rate) + rate
    return t["lr"] * max(0.0, factor)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--init", help="HF checkpoint directory (model.safetensors, F32) to start from")
    ap.add_argument("--write-init", help="write a seeded init checkpoint here and exit")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = all cores)")
    a = ap.parse_args()
    cfg = load_config(a.config, a.sets)
    m, t = cfg["model"], cfg["train"]
    if a.write_init:
        write_init(m, int(t.get("seed", 0)), a.write_init)
        return 0
    if a.steps is not None:
        t["steps"] = a.steps
    torch.set_num_threads(a.threads or os.cpu_count())
    torch.set_num_interop_threads(1)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(a.config))))
    data = Tokens(cfg["data"], root)
    if a.init:
        P = read_safetensors(os.path.join(a.init, "model.safetensors"))
    else:
        g = torch.Generator().manual_seed(int(t.get("seed", 0)))
        P = {nm: (torch.ones(s) if len(s) == 1 else torch.empty(s).normal_(0.0, 0.02, generator=g)) for nm, s in param_shapes(m)}
    for v in P.values():
        v.requires_grad_(True)
    decay = [v for v in P.values() if v.dim() >= 2]
    no_decay = [v for v in P.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t.get("weight_decay", 0.0)}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=(t.get("adam_beta1", 0.9), t.get("adam_beta2", 0.999)), eps=t.get("adam_epsilon", 1e-8))
    N, B, seed = t["seq_length"], t.get("micro_batch_size", 1), int(t.get("seed", 0))
    clip = t.get("grad_clip", 0.0)
    sp, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if sp > 1:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
        import torch_store_compat  # torch 2.x built without libuv (Debian 13)

        torch_store_compat.patch()
        dist.init_process_group("gloo", rank=rank, world_size=sp)
    n = N // sp
    names = list(P)
    for s in range(t["steps"]):
        t0 = time.perf_counter()
        ids, labels = data.batch(N, s, 0, B, seed)
        ids, labels = ids[:, rank * n:(rank + 1) * n].contiguous(), labels[:, rank * n:(rank + 1) * n].contiguous()  # (B, n)
        for v in P.values():
            v.grad = None
        loss_sum = forward_loss_sum(P, m, ids, labels, rank * n, sp)
        loss_sum.backward()
        with torch.no_grad():
            # one all-reduce of [every gradient, loss sum, valid-token count] (a no-op at sp 1)
            flat = torch.cat([P[k].grad.reshape(-1) for k in names] + [loss_sum.detach().reshape(1), (labels != -100).sum().reshape(1).float()])
            if sp > 1:
                dist.all_reduce(flat)
            count = max(1.0, float(flat[-1]))
            loss_total = float(flat[-2])
            off = 0
            for k in names:
                P[k].grad = flat[off:off + P[k].numel()].view_as(P[k]).div(count)
                off += P[k].numel()
            norm = math.sqrt(float(torch.stack([v.grad.double().pow(2).sum() for v in P.values()]).sum()))
            if clip > 0 and norm > clip:
                for v in P.values():
                    v.grad.mul_(clip / (norm + 1e-6))
            lr = learning_rate(t, s)
            for gr in opt.param_groups:
                gr["lr"] = lr
            opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if rank == 0:
            print(json.dumps({"step": s, "loss": loss_total / count, "step_ms": ms, "grad_norm": norm}), flush=True)
    if sp > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
