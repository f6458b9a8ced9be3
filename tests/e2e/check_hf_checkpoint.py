#!/usr/bin/env python3
"""Independent reader for a checkpoint written by ulysses-run (train.save_to): checks
model.safetensors against the safetensors spec and Hugging Face Llama's parameter names and
shapes computed from config.json, using only the Python standard library.
Usage: check_hf_checkpoint.py RUN_CONFIG.json OUT_DIR"""
import json, os, struct, subprocess, sys, tempfile

run_bin, worker_bin, config = sys.argv[1], sys.argv[2], sys.argv[3]
with tempfile.TemporaryDirectory() as tmp:
    ckpt = os.path.join(tmp, "ckpt")
    r = subprocess.run([run_bin, config, "--worker", worker_bin, "--out", os.path.join(tmp, "run"),
                        "--set", "train.steps=1", "--set", "train.save_to=" + ckpt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"], cfg
    raw = open(os.path.join(ckpt, "model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    assert meta.get("format") == "pt", meta
    sizes = {"F32": 4, "BF16": 2, "F16": 2}
    spans = []
    for name, e in header.items():
        count = 1
        for d in e["shape"]:
            count *= d
        b, end = e["data_offsets"]
        assert end - b == count * sizes[e["dtype"]], name
        spans.append((b, end))
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data), "data section must be covered exactly"
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 == b0, "tensors must be contiguous and non-overlapping"
    d, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, Hkv, ff = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    dh = d // H
    want = {"model.embed_tokens.weight": [V, d], "model.norm.weight": [d]}
    if not cfg["tie_word_embeddings"]:
        want["lm_head.weight"] = [V, d]
    for i in range(L):
        p = f"model.layers.{i}."
        want.update({p + "self_attn.q_proj.weight": [H * dh, d], p + "self_attn.k_proj.weight": [Hkv * dh, d],
                     p + "self_attn.v_proj.weight": [Hkv * dh, d], p + "self_attn.o_proj.weight": [d, H * dh],
                     p + "mlp.gate_proj.weight": [ff, d], p + "mlp.up_proj.weight": [ff, d],
                     p + "mlp.down_proj.weight": [d, ff], p + "input_layernorm.weight": [d],
                     p + "post_attention_layernorm.weight": [d]})
    got = {k: v["shape"] for k, v in header.items()}
    assert got == want, (sorted(set(got) ^ set(want)), [k for k in want if got.get(k) != want[k]])
    # the norm weights start at 1 and train for one step: present and finite
    off = header["model.norm.weight"]["data_offsets"][0]
    vals = struct.unpack("<%df" % d, data[off:off + 4 * d])
    assert all(abs(v - 1.0) < 0.5 for v in vals), vals[:4]
print("checkpoint OK: %d tensors" % len(header))
