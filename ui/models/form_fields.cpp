// Field table of the launcher form (keys and meaning from engine/config/run_config.hpp).
#include "config_fields.hpp"

namespace ulysses::ui {

const QVector<FieldSpec>& configFields() {
  using K = FieldKind;
  static const QVector<FieldSpec> t = {
      {"model", "vocab_size", K::Integer, "Vocabulary", "vocab_size: token ids 0..V-1 (256 for byte-level text)", {}},
      {"model", "hidden_size", K::Integer, "Hidden size", "hidden_size d", {}},
      {"model", "intermediate_size", K::Integer, "FFN size", "intermediate_size of the SwiGLU MLP", {}},
      {"model", "num_hidden_layers", K::Integer, "Layers", "num_hidden_layers", {}},
      {"model", "num_attention_heads", K::Integer, "Attention heads", "num_attention_heads H (must divide by sp_size)", {}},
      {"model", "num_key_value_heads", K::Integer, "KV heads", "num_key_value_heads (GQA when < heads)", {}},
      {"model", "rms_norm_eps", K::Number, "RMSNorm eps", "rms_norm_eps", {}},
      {"model", "rope_theta", K::Number, "RoPE theta", "rope_theta", {}},
      {"model", "max_position_embeddings", K::Integer, "Max positions", "max_position_embeddings", {}},
      {"model", "tie_word_embeddings", K::Check, "Tie embeddings", "tie_word_embeddings: lm_head shares the embedding", {}},
      {"parallel", "sp_size", K::Integer, "Sequence parallel (sp)", "Ulysses ranks that split one sequence", {}},
      {"parallel", "dp_size", K::Integer, "Data parallel (dp)", "replicas; world size = sp x dp", {}},
      {"parallel", "head_chunks", K::Integer, "Head chunks", "overlap the all-to-all of chunk i+1 with attention of chunk i", {}},
      {"parallel", "backend", K::Choice, "Backend", "collectives: gloo (CPU), nccl (GPU) or auto", {"auto", "gloo", "nccl"}},
      {"parallel", "fused_qkv", K::Check, "Fused q/k/v all-to-all", "one all-to-all for q, k and v", {}},
      {"parallel", "timeout_s", K::Number, "Collective timeout (s)", "timeout of every collective", {}},
      {"train", "seq_length", K::Integer, "Sequence length", "tokens per sequence N (must divide by sp_size)", {}},
      {"train", "micro_batch_size", K::Integer, "Micro batch", "sequences per step per data-parallel rank", {}},
      {"train", "steps", K::Integer, "Steps", "optimizer steps", {}},
      {"train", "lr", K::Number, "Learning rate", "peak learning rate (AdamW)", {}},
      {"train", "warmup_steps", K::Integer, "Warm-up steps", "linear warm-up", {}},
      {"train", "min_lr", K::Number, "Min learning rate", "cosine decay floor", {}},
      {"train", "weight_decay", K::Number, "Weight decay", "AdamW weight decay", {}},
      {"train", "grad_clip", K::Number, "Gradient clip", "max gradient norm, 0 = off", {}},
      {"train", "gradient_accumulation_steps", K::Integer, "Gradient accumulation", "micro-steps per optimizer step (token-weighted)", {}},
      {"train", "lr_scheduler_type", K::Choice, "LR schedule", "transformers' get_scheduler formulas; warm-up from 0", {"cosine_with_min_lr", "cosine", "linear", "constant_with_warmup"}},
      {"train", "adam_beta1", K::Number, "Adam beta1", "AdamW first-moment decay", {}},
      {"train", "adam_beta2", K::Number, "Adam beta2", "AdamW second-moment decay", {}},
      {"train", "adam_epsilon", K::Number, "Adam epsilon", "AdamW epsilon", {}},
      {"train", "seed", K::Integer, "Seed", "same seed, same loss", {}},
      {"train", "dtype", K::Choice, "Dtype", "float32, or bfloat16 with fp32 master weights", {"float32", "bfloat16"}},
      {"train", "device", K::Choice, "Device", "auto = cuda when GPUs are present", {"auto", "cpu", "cuda"}},
      {"train", "threads_per_rank", K::Integer, "Threads per rank", "0 = cores / local ranks", {}},
      {"train", "activation_checkpointing", K::Choice, "Activation checkpointing", "layer: keep only each layer's input, recompute in backward", {"none", "layer"}},
      {"train", "offload_activations", K::Check, "Offload checkpoints", "kept layer inputs go to CPU memory (needs checkpointing)", {}},
      {"train", "loss_chunk_tokens", K::Integer, "Loss chunk (tokens)", "tiled lm_head + loss: no [N, vocab] tensor; 0 = off", {}},
      {"train", "mlp_chunk_tokens", K::Integer, "MLP chunk (tokens)", "TiledMLP: the MLP over token chunks with recompute; 0 = off", {}},
      {"train", "attention", K::Choice, "Attention kernel", "auto: block-causal on CPU, SDPA (flash) on GPU", {"auto", "sdpa", "blocked"}},
      {"train", "attention_block", K::Integer, "Attention block", "tokens per block of the block-causal attention", {}},
      {"train", "init_from", K::Path, "Initialize from", "Hugging Face checkpoint directory (empty = random init)", {}},
      {"train", "save_to", K::Path, "Save to", "Hugging Face checkpoint directory written at the end (empty = none)", {}},
      {"train", "save_shard_bytes", K::Integer, "Shard size (bytes)", "split the saved model into files of at most this size; 0 = one file", {}},
      {"train", "save_every", K::Integer, "Checkpoint every", "full training state into save_to/step-N every this many steps; 0 = off", {}},
      {"train", "save_keep", K::Integer, "Checkpoints kept", "the last this many complete step-N checkpoints", {}},
      {"train", "resume_from", K::Path, "Resume from", "a save_to folder (its latest complete checkpoint) or one step-N folder; empty = none", {}},
      {"data", "kind", K::Choice, "Data", "synthetic tokens, byte-level text file, or a raw token file", {"synthetic", "text", "tokens"}},
      {"data", "path", K::Path, "Data file", "text or token file (kind text/tokens)", {}},
      {"data", "token_dtype", K::Choice, "Token width", "for kind=tokens", {"uint16", "uint32"}},
      {"profile", "enabled", K::Check, "Trace", "write RUN/trace/rank*.sqlite", {}},
      {"profile", "memory", K::Check, "Memory samples", "sample memory in the trace", {}},
      {"profile", "step_begin", K::Integer, "First traced step", "0-based", {}},
      {"profile", "step_end", K::Integer, "Last traced step", "-1 = all", {}},
      {"faults", "slow_rank", K::Integer, "Slow rank", "this rank sleeps before each collective: a straggler on demand; -1 = off", {}},
      {"faults", "delay_ms", K::Number, "Delay (ms)", "sleep of the slow rank before each collective", {}},
  };
  return t;
}

}  // namespace ulysses::ui
