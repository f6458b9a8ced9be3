#!/usr/bin/python3
# Generates tests/data/foreign/kineto_2rank/rank{0,1}.json: a real PyTorch profiler (Kineto)
# trace of a 2-rank Gloo run on CPU with the Ulysses pattern per layer: all_to_all
# (seq->head), scaled-dot-product attention over the full sequence with local heads,
# all_to_all (head->seq). Run with Debian's python3-torch (1.13): /usr/bin/python3 THIS OUTDIR
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

B, N, H, DH, P, LAYERS = 1, 64, 4, 16, 2, 2


def ulysses_attention(q):  # q: (B, N/P, H, dh) -> (B, N/P, H, dh)
    # (B, N/P, H, dh) -> (P, B, N/P, H/P, dh): chunk heads by destination rank
    x = q.reshape(B, N // P, P, H // P, DH).permute(2, 0, 1, 3, 4).contiguous()
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)  # seq->head
    # (P, B, N/P, H/P, dh) -> (B, N, H/P, dh) -> (B, H/P, N, dh)
    full = y.permute(1, 0, 2, 3, 4).reshape(B, N, H // P, DH).transpose(1, 2)
    att = torch.nn.functional.scaled_dot_product_attention(full, full, full, is_causal=True) \
        if hasattr(torch.nn.functional, "scaled_dot_product_attention") else \
        torch.ops.aten._scaled_dot_product_attention(full, full, full, None, 0.0, False, True)[0]
    # (B, H/P, N, dh) -> (P, B, N/P, H/P, dh)
    back = att.transpose(1, 2).reshape(B, P, N // P, H // P, DH).permute(1, 0, 2, 3, 4).contiguous()
    out = torch.empty_like(back)
    dist.all_to_all_single(out, back)  # head->seq
    # (P, B, N/P, H/P, dh) -> (B, N/P, H, dh)
    return out.permute(1, 2, 0, 3, 4).reshape(B, N // P, H, DH)


def worker(rank, outdir, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=P)
    torch.manual_seed(rank)
    x = torch.randn(B, N // P, H, DH)
    w = torch.randn(H * DH, H * DH) / 8
    acts = torch.profiler.ProfilerActivity
    with torch.profiler.profile(activities=[acts.CPU]) as prof:
        for layer in range(LAYERS):
            with torch.profiler.record_function("layer%d" % layer):
                q = (x.reshape(B, N // P, H * DH) @ w).reshape(B, N // P, H, DH)  # qkv proj
                x = ulysses_attention(q)
        dist.barrier()
    prof.export_chrome_trace(os.path.join(outdir, "rank%d.json" % rank))
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "kineto_2rank"
    os.makedirs(out, exist_ok=True)
    mp.spawn(worker, args=(out, 29533), nprocs=P, join=True)
