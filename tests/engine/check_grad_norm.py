#!/usr/bin/env python3
"""The numerics reference check (docs/NUMERICS.md), Python half: the engine's grad_norm,
clipping and loss against torch.nn.utils.clip_grad_norm_ and an exact sum, computed in fp64
from the engine's own gradients and per-token losses (numerics_dump writes them; see
numerics_dump.cpp).

For each model and sp: |grad_norm - clip_grad_norm_(fp64)| / ref < 1e-6; every clipped
gradient within 2e-6 relative of clip_grad_norm_'s fp64 clipping of the same gradients
(clipping uses the accurate norm); the loss within 1e-6 of math.fsum(per-token losses) /
tokens over all ranks. Also prints the old single-fp32-norm's error, for the record.

  check_grad_norm.py NUMERICS_DUMP SOURCE_DIR [--model tiny|3m|50m]... [--sp N]... [--dp N]...
Exit 0 when every case passes, 1 on a mismatch, 2 on bad usage."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

# Model shapes (Llama; synthetic tokens). "3m" is the 3.2M-parameter shape of
# docs/NUMERICS.md, "50m" a 50.2M one (vocab 32000 as Llama 2).
MODELS = {
    "tiny": ["model.vocab_size=256", "model.hidden_size=64", "model.intermediate_size=176",
             "model.num_hidden_layers=2", "model.num_attention_heads=4", "model.num_key_value_heads=2",
             "train.seq_length=512"],
    "3m": ["model.vocab_size=2048", "model.hidden_size=256", "model.intermediate_size=688",
           "model.num_hidden_layers=3", "model.num_attention_heads=4", "model.num_key_value_heads=2",
           "train.seq_length=256"],
    "50m": ["model.vocab_size=32000", "model.hidden_size=512", "model.intermediate_size=1376",
            "model.num_hidden_layers=6", "model.num_attention_heads=8", "model.num_key_value_heads=4",
            "train.seq_length=256"],
}
BOUND = 1e-6


def f32(path):
    return torch.from_numpy(np.fromfile(path, dtype=np.float32))


def one_case(dump, src, model, sp, dp, tmp):
    out = os.path.join(tmp, "%s-sp%d-dp%d" % (model, sp, dp))
    os.makedirs(out, exist_ok=True)
    sets = MODELS[model] + ["parallel.sp_size=%d" % sp, "parallel.dp_size=%d" % dp, "data.kind=synthetic",
                            "data.path=", "train.grad_clip=0.01", "train.micro_batch_size=1"]
    cmd = [dump, os.path.join(src, "resources", "configs", "tiny.json"), out]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("numerics_dump failed (%d): %s" % (r.returncode, r.stderr.strip()))
        return False
    res = json.load(open(os.path.join(out, "result.json")))
    g = f32(os.path.join(out, "grads.f32"))
    clipped = f32(os.path.join(out, "clipped.f32"))
    assert g.numel() == res["numel"] == clipped.numel(), (g.numel(), res["numel"], clipped.numel())
    # the reference: clip_grad_norm_ over fp64 copies of the same gradients, parameter by parameter
    params, off = [], 0
    for shape in res["shapes"]:
        n = int(np.prod(shape)) if shape else 1
        p = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
        p.grad = g[off:off + n].to(torch.float64).view(shape).clone()
        params.append(p)
        off += n
    assert off == g.numel()
    ref = float(torch.nn.utils.clip_grad_norm_(params, max_norm=res["clip"], norm_type=2.0))
    ref_clipped = torch.cat([p.grad.reshape(-1) for p in params])  # fp64, clipped by clip_grad_norm_
    norm_err = abs(res["grad_norm"] - ref) / ref
    plain_err = abs(res["plain_fp32_norm"] - ref) / ref
    diff = (clipped.to(torch.float64) - ref_clipped).abs()
    clip_err = float((diff / ref_clipped.abs().clamp_min(1e-30)).max())
    tokens = [f32(os.path.join(out, "tokens_rank%d.f32" % r)).tolist() for r in range(res["world"])]
    count = sum(len(t) for t in tokens)
    ref_loss = math.fsum(math.fsum(t) for t in tokens) / count
    loss_err = abs(res["loss"] - ref_loss) / ref_loss
    ok = norm_err < BOUND and clip_err < 2 * BOUND and loss_err < BOUND
    print("%-5s sp %d dp %d  params %9d  grad_norm %.9g  clip_grad_norm_(fp64) %.9g  rel %.1e  "
          "(old fp32 norm: rel %.1e)  clipped max rel %.1e  loss %.9g vs %.9g rel %.1e  %s"
          % (model, sp, dp, g.numel(), res["grad_norm"], ref, norm_err, plain_err, clip_err, res["loss"], ref_loss,
             loss_err, "ok" if ok else "FAIL"))
    if not ok:
        worst = int((diff / ref_clipped.abs().clamp_min(1e-30)).argmax())
        print("  first look: clipped[%d] engine %.9g reference %.9g" % (worst, float(clipped[worst]),
                                                                       float(ref_clipped[worst])))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("source_dir")
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    ap.add_argument("--sp", action="append", type=int)
    ap.add_argument("--dp", action="append", type=int)
    a = ap.parse_args()
    if not os.access(a.dump, os.X_OK):
        print("check_grad_norm.py: %s is not an executable (build numerics_dump)" % a.dump)
        return 2
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for model in dict.fromkeys(a.model or ["tiny", "3m"]):
            for sp in sorted(set(a.sp or [1, 2, 4])):
                for dp in sorted(set(a.dp or [1])):
                    ok = one_case(a.dump, a.source_dir, model, sp, dp, tmp) and ok
    print("all within %.0e" % BOUND if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
