// Validation of a run config: every rule a launch must pass (ranges, heads over ranks,
// techniques, data, profile window, faults), all problems reported in one pass, and the checks
// that read the data file.
#include "run_config.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint_layout.hpp"
#include "config_fields.hpp"
#include "documents_manifest.hpp"
#include "json_checked.hpp"
#include "ring_geometry.hpp"
#include "ulysses_geometry.hpp"

namespace ulysses {

namespace {

std::string cv_num(int64_t v) { return std::to_string(v); }
std::string cv_show_double(double v) { return json_for_message(json(v)); }

// The size of a file in bytes, or -1.
int64_t cv_file_size(const std::string& p) {
  std::error_code ec;
  auto s = std::filesystem::file_size(p, ec);
  return ec ? -1 : static_cast<int64_t>(s);
}

}  // namespace

// Family and RoPE rules of the model section; formulas in docs/CONTRACTS.md.
static void validate_model_family(const ModelConfig& m,
                                  const std::function<void(const std::string&, const std::string&)>& bad) {
  // Choices from the field table (config_fields.cpp).
  auto one_of = [&](const std::string& field, const std::string& v) {
    const ConfigField* f = find_config_field(field);
    if (std::find(f->choices.begin(), f->choices.end(), v) != f->choices.end()) return true;
    bad(field, field + " must be " + choice_list(*f) + ", got '" + v + "'");
    return false;
  };
  if (one_of("model.model_type", m.model_type) && m.attention_bias &&
      (m.model_type == "mistral" || m.model_type == "qwen2"))
    bad("model.attention_bias",
        "model.attention_bias must be false for " + m.model_type +
            (m.model_type == "qwen2" ? " (it always has q/k/v biases and no o bias)" : " (it has no biases)"));
  one_of("model.rope_precision", m.rope_precision);
  const std::string& t = m.rope_type;
  if (!one_of("model.rope_type", t)) return;
  auto finite = [](double x) { return std::isfinite(x); };
  if (t != "default" && !(finite(m.rope_factor) && m.rope_factor >= 1 && m.rope_factor <= 1e6))
    bad("model.rope_factor", "model.rope_factor must be between 1 and 1e6 for rope_type " + t);
  if (m.rope_original_max_position_embeddings < 0 || m.rope_original_max_position_embeddings > kMaxTokens)
    bad("model.rope_original_max_position_embeddings",
        "model.rope_original_max_position_embeddings must be >= 0 and at most " + cv_num(kMaxTokens));
  if (t == "llama3") {
    if (m.rope_original_max_position_embeddings < 1)
      bad("model.rope_original_max_position_embeddings",
          "rope_type llama3 needs model.rope_original_max_position_embeddings (e.g. 8192)");
    if (!(finite(m.rope_low_freq_factor) && finite(m.rope_high_freq_factor) && m.rope_low_freq_factor > 0 &&
          m.rope_high_freq_factor > m.rope_low_freq_factor))
      bad("model.rope_high_freq_factor",
          "rope_type llama3 needs 0 < model.rope_low_freq_factor < model.rope_high_freq_factor");
  }
  if (t == "yarn") {
    if (!(finite(m.rope_beta_fast) && finite(m.rope_beta_slow) && m.rope_beta_fast > 0 && m.rope_beta_slow > 0))
      bad("model.rope_beta_fast", "rope_type yarn needs positive model.rope_beta_fast and model.rope_beta_slow");
    if (!(finite(m.rope_attention_factor) && m.rope_attention_factor >= 0 && m.rope_attention_factor <= 100))
      bad("model.rope_attention_factor",
          "model.rope_attention_factor must be between 0 and 100 (0 = Hugging Face's default 0.1 ln(factor) + 1, "
          "about 1.07 for factor 2)");
    // Transformers versions disagree on yarn's factor when original_max_position_embeddings is
    // set (some replace factor by max_position_embeddings / original): accept only configs on
    // which they agree.
    const int64_t orig = m.rope_original_max_position_embeddings;
    if (orig > 0 &&
        std::fabs(static_cast<double>(m.max_position_embeddings) - m.rope_factor * static_cast<double>(orig)) > 1e-6) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", m.rope_factor);
      bad("model.max_position_embeddings",
          "rope_type yarn with original_max_position_embeddings " + cv_num(orig) + " and factor " + buf +
              " needs model.max_position_embeddings = factor x original = " +
              cv_num(static_cast<int64_t>(std::llround(m.rope_factor * static_cast<double>(orig)))) + " (got " +
              cv_num(m.max_position_embeddings) + "; Transformers versions compute different frequencies otherwise)");
    }
  }
}

namespace {

// The checks of validate(), appending to one list in the order they run.
struct Checker {
  std::vector<ConfigIssue>& out;
  void bad(const std::string& field, const std::string& msg) { out.push_back({field, msg}); }
  // Every integer has a range: without an upper bound, num_hidden_layers=1e9 builds a model
  // until memory runs out and products such as sp_size x dp_size overflow int64.
  bool in_range(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      bad(field, field + " must be " +
                     (lo == 1   ? std::string("positive")
                      : lo == 0 ? std::string(">= 0")
                                : ">= " + cv_num(lo)) +
                     " and at most " + cv_num(hi) + ", got " + cv_num(v));
      return false;
    }
    return true;
  }
  // Integer range and choices from the field table (config_fields.cpp), one source for the form too.
  bool ranged(const std::string& field, int64_t v) {
    const ConfigField* f = find_config_field(field);
    return in_range(field, v, f->min.value_or(INT64_MIN), f->max.value_or(INT64_MAX));
  }
  bool one_of(const std::string& field, const std::string& v) {
    const ConfigField* f = find_config_field(field);
    if (std::find(f->choices.begin(), f->choices.end(), v) != f->choices.end()) return true;
    bad(field, field + " must be " + choice_list(*f) + ", got '" + v + "'");
    return false;
  }
  bool finite(const std::string& field, double v) {
    if (!std::isfinite(v)) bad(field, field + " must be a finite number");
    return std::isfinite(v);
  }
};

// Which sections' sizes are in range (the checks that multiply them need all three).
struct SectionsOk {
  bool model = true, par = true, train = true;
  bool all() const { return model && par && train; }
};

SectionsOk check_sizes(const RunConfig& c, Checker& k) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const auto& t = c.train;
  SectionsOk ok;
  bool& ok_model = ok.model;
  bool& ok_par = ok.par;
  bool& ok_train = ok.train;
  ok_model = k.ranged("model.vocab_size", m.vocab_size);
  ok_model &= k.ranged("model.hidden_size", m.hidden_size);
  ok_model &= k.ranged("model.intermediate_size", m.intermediate_size);
  ok_model &= k.ranged("model.num_hidden_layers", m.num_hidden_layers);
  ok_model &= k.ranged("model.num_attention_heads", m.num_attention_heads);
  ok_model &= k.ranged("model.num_key_value_heads", m.num_key_value_heads);
  ok_model &= k.ranged("model.max_position_embeddings", m.max_position_embeddings);
  ok_par = k.ranged("parallel.sp_size", p.sp_size);
  ok_par &= k.ranged("parallel.dp_size", p.dp_size);
  ok_par &= k.ranged("parallel.head_chunks", p.head_chunks);
  ok_par &= k.ranged("parallel.ring_size", p.ring_size);
  ok_train = k.ranged("train.seq_length", t.seq_length);
  ok_train &= k.ranged("train.micro_batch_size", t.micro_batch_size);
  k.ranged("train.steps", t.steps);
  k.ranged("train.warmup_steps", t.warmup_steps);
  return ok;
}

// Learning rate, AdamW, clipping, threads, accumulation, schedule, save shards.
void check_optimizer(const TrainConfig& t, Checker& k) {
  // At most 10: no AdamW run trains above it, and 1e300 (finite, so a finiteness check
  // passes it) turns the weights into inf at the first update, a NaN loss after launch.
  const bool lr_ok = k.finite("train.lr", t.lr) && t.lr > 0 && t.lr <= kMaxLr;
  if (std::isfinite(t.lr) && !lr_ok)
    k.bad("train.lr",
          "train.lr must be positive and at most " + cv_show_double(kMaxLr) + ", got " + cv_show_double(t.lr));
  if (k.finite("train.min_lr", t.min_lr) && (t.min_lr < 0 || t.min_lr > t.lr))
    k.bad("train.min_lr", "train.min_lr must be between 0 and train.lr");
  // AdamW multiplies every weight by 1 - lr x weight_decay each step: at 1 and above it zeroes or
  // flips the weights (1e300 gives a NaN loss after launch).
  if (k.finite("train.weight_decay", t.weight_decay) && t.weight_decay < 0)
    k.bad("train.weight_decay", "train.weight_decay must be >= 0");
  else if (lr_ok && std::isfinite(t.weight_decay) && !(t.lr * t.weight_decay < 1))
    k.bad("train.weight_decay",
          "train.lr x train.weight_decay must be below 1 (AdamW scales every weight by 1 - lr x "
          "weight_decay each step), got " +
              cv_show_double(t.lr) + " x " + cv_show_double(t.weight_decay));
  if (k.finite("train.grad_clip", t.grad_clip) && t.grad_clip < 0)
    k.bad("train.grad_clip", "train.grad_clip must be >= 0 (0 disables clipping)");
  k.ranged("train.threads_per_rank", t.threads_per_rank);
  k.ranged("train.gradient_accumulation_steps", t.gradient_accumulation_steps);
  if (k.finite("train.adam_beta1", t.adam_beta1) && !(t.adam_beta1 >= 0 && t.adam_beta1 < 1))
    k.bad("train.adam_beta1", "train.adam_beta1 must be in [0, 1)");
  if (k.finite("train.adam_beta2", t.adam_beta2) && !(t.adam_beta2 >= 0 && t.adam_beta2 < 1))
    k.bad("train.adam_beta2", "train.adam_beta2 must be in [0, 1)");
  if (k.finite("train.adam_epsilon", t.adam_epsilon) && !(t.adam_epsilon > 0 && t.adam_epsilon <= 1))
    k.bad("train.adam_epsilon", "train.adam_epsilon must be positive and at most 1");
  k.one_of("train.lr_scheduler_type", t.lr_scheduler_type);
  k.ranged("train.save_shard_bytes", t.save_shard_bytes);
}

// Model numerics, the collective timeout and the world size.
void check_numerics(const RunConfig& c, const SectionsOk& ok, Checker& k) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const bool ok_par = ok.par;
  if (k.finite("model.rms_norm_eps", m.rms_norm_eps) && !(m.rms_norm_eps > 0 && m.rms_norm_eps <= 1))
    k.bad("model.rms_norm_eps", "model.rms_norm_eps must be positive and at most 1");
  // At least 1: below it RoPE's frequencies theta^(-2i/d) grow past what fp32 holds (1e-50
  // gives a NaN loss at step 0, after launch); real models use 1e4 and more.
  if (k.finite("model.rope_theta", m.rope_theta) && !(m.rope_theta >= 1 && m.rope_theta <= 1e15))
    k.bad("model.rope_theta", "model.rope_theta must be between 1 and 1e15 (Llama uses 10000 or 500000)");
  // At least 1 s: with less (0.001) the launcher's liveness check declares a healthy rank dead
  // after launch and c10d times out before the ranks have met.
  if (k.finite("parallel.timeout_s", p.timeout_s) && !(p.timeout_s >= kMinTimeoutS && p.timeout_s <= kMaxTimeoutS)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", p.timeout_s);
    k.bad("parallel.timeout_s", std::string("parallel.timeout_s must be at least 1 s and at most ") +
                                    cv_num(static_cast<int64_t>(kMaxTimeoutS)) + " (7 days), got " + buf);
  }
  if (ok_par && p.world_size() > kMaxWorld)
    k.bad("parallel.sp_size", (p.ring_size > 1 ? "sp_size x ring_size x dp_size = " : "sp_size x dp_size = ") +
                                  cv_num(p.world_size()) + " ranks is more than " + cv_num(kMaxWorld));
}

// Byte counts of the step, in checked 64-bit arithmetic: the cost model and the engine
// multiply these sizes, and a product past 2^63 wraps to nonsense (negative sizes).
void check_step_bytes(const RunConfig& c, Checker& k) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const auto& t = c.train;
  auto mul = [](int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); };
  auto add = [](int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); };
  const int64_t b = t.micro_batch_size, N = t.seq_length, d = m.hidden_size, f = m.intermediate_size,
                L = m.num_hidden_layers;
  const int64_t V = m.vocab_size, H = m.num_attention_heads;
  int64_t per_token = 0, act = 0, logits = 0, scores = 0, tokens = 0, x = 0;
  // activations ~ b*N*(L*(12d + 3f) + d)*4 bytes; logits b*N*V*8; math attention 2*b*H*N^2*L*4
  // (train.attention sdpa off cuda only)
  const bool fits = mul(d, 12, &x) && mul(f, 3, &per_token) && add(x, per_token, &per_token) &&
                    mul(per_token, L, &per_token) && add(per_token, d, &per_token) && mul(b, N, &tokens) &&
                    mul(tokens, per_token, &act) && mul(act, 4, &act) && mul(tokens, V, &logits) &&
                    mul(logits, 8, &logits) && add(act, logits, &x) && mul(tokens, p.dp_size, &x) &&
                    // N x N scores only where the kernel that runs materializes them: sdpa off cuda (its math
                    // path); not flash on cuda, not the blocked kernel CPU runs by default (attention auto)
                    (t.device == "cuda" || t.attention != "sdpa" ||
                     (mul(tokens, N, &scores) && mul(scores, H, &scores) && mul(scores, L, &scores) &&
                      mul(scores, 8, &scores) && add(act + logits, scores, &x)));
  if (!fits)
    k.bad("train.seq_length",
          "train.seq_length (" + cv_num(N) + ") x train.micro_batch_size (" + cv_num(b) +
              ") with this model needs more than 2^63 bytes for one step's activations; reduce them");
}

// Head size, GQA groups, heads over ranks and the sequence split (ulysses_geometry.hpp,
// ring_geometry.hpp).
void check_heads(const RunConfig& c, SectionsOk& ok, Checker& k) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const auto& t = c.train;
  bool& ok_model = ok.model;
  const bool ok_par = ok.par, ok_train = ok.train;
  ok_model &= k.ranged("model.head_dim", m.explicit_head_dim);
  if (ok_model) {
    if (m.explicit_head_dim > 0) {
      if (m.head_dim() % 2 != 0)
        k.bad("model.head_dim", "model.head_dim (" + cv_num(m.head_dim()) + ") must be even for RoPE");
    } else if (m.hidden_size % m.num_attention_heads != 0)
      k.bad("model.hidden_size", "model.hidden_size (" + cv_num(m.hidden_size) +
                                     ") must be divisible by model.num_attention_heads (" +
                                     cv_num(m.num_attention_heads) + "), or set model.head_dim");
    else if (m.head_dim() % 2 != 0)
      k.bad("model.hidden_size",
            "head dimension hidden_size/num_attention_heads (" + cv_num(m.head_dim()) + ") must be even for RoPE");
    for (auto& i : ulysses_geometry(m.num_attention_heads, m.num_key_value_heads, 1, 1).issues)
      k.out.push_back(i);  // GQA groups
  }
  if (ok_model && ok_par && ok_train) {
    // Heads over ranks, kv replication, head chunks: the rules of ulysses_geometry.hpp (the
    // GQA rule, P-independent, was reported above).
    const auto gqa = ulysses_geometry(m.num_attention_heads, m.num_key_value_heads, 1, 1).issues;
    for (auto& i : ulysses_geometry(c).issues)
      if (std::none_of(gqa.begin(), gqa.end(), [&](const ConfigIssue& x) { return x.message == i.message; }))
        k.out.push_back(i);
    if (p.ring_size > 1) {
      for (auto& i : ring_issues(t.seq_length, p.sp_size, p.ring_size, p.ring_zigzag)) k.out.push_back(i);
    } else if (t.seq_length > 0 && t.seq_length % p.sp_size != 0)
      k.bad("train.seq_length", "train.seq_length (" + cv_num(t.seq_length) +
                                    ") must be divisible by parallel.sp_size (" + cv_num(p.sp_size) + "); try " +
                                    cv_num((t.seq_length / p.sp_size + 1) * p.sp_size));
  }
}

// Backend, device, dtype and the memory techniques (checkpointing, offload, ZeRO, tiling,
// attention kernel, saves).
void check_techniques(const RunConfig& c, Checker& k) {
  const auto& p = c.parallel;
  const auto& t = c.train;
  // The ring on NCCL exchanges by all-to-all (ring_transport_for): p2p's separate send and
  // recv can deadlock there.
  if (k.one_of("parallel.ring_transport", p.ring_transport) && p.ring_size > 1 && p.ring_transport == "p2p" &&
      (p.backend == "nccl" || t.device == "cuda"))
    k.bad("parallel.ring_transport",
          "parallel.ring_transport p2p runs on Gloo only (train.device=cpu): separate send and recv calls can "
          "deadlock on NCCL; use parallel.ring_transport=auto or alltoall");
  k.one_of("parallel.backend", p.backend);
  k.one_of("train.dtype", t.dtype);
  k.one_of("train.device", t.device);
  k.one_of("train.activation_checkpointing", t.activation_checkpointing);
  if (t.offload_activations && t.activation_checkpointing != "layer")
    k.bad("train.offload_activations",
          "train.offload_activations needs train.activation_checkpointing=layer (only the kept layer inputs are "
          "offloaded)");
  k.ranged("train.zero_stage", t.zero_stage);
  if (t.offload_optimizer && t.zero_stage < 1)
    k.bad("train.offload_optimizer",
          "train.offload_optimizer needs train.zero_stage >= 1 (the offloaded AdamW state is each rank's shard)");
  if (t.offload_params && t.zero_stage < 3)
    k.bad("train.offload_params",
          "train.offload_params needs train.zero_stage 3 (only stage 3 shards the parameters; got " +
              cv_num(t.zero_stage) + ")");
  k.ranged("train.loss_chunk_tokens", t.loss_chunk_tokens);
  k.ranged("train.mlp_chunk_tokens", t.mlp_chunk_tokens);
  k.ranged("train.proj_chunk_tokens", t.proj_chunk_tokens);
  k.one_of("train.attention", t.attention);
  k.one_of("train.allocator", t.allocator);
  if (k.one_of("train.grad_accum_dtype", t.grad_accum_dtype) && t.grad_accum_dtype == "bfloat16") {
    if (t.dtype != "bfloat16")
      k.bad("train.grad_accum_dtype",
            "train.grad_accum_dtype=bfloat16 needs train.dtype=bfloat16 (a float32 run's gradients are float32)");
    else if (t.zero_stage < 3)
      k.bad("train.grad_accum_dtype", "train.grad_accum_dtype=bfloat16 needs train.zero_stage 3 (got " +
                                          cv_num(t.zero_stage) + "; stages 0-2 accumulate in float32)");
  }
  k.one_of("train.gather_dtype", t.gather_dtype);
  if (k.one_of("train.grad_reduce_dtype", t.grad_reduce_dtype) && t.grad_reduce_dtype == "bfloat16" &&
      !t.bf16_unit_grads())
    k.bad("train.grad_reduce_dtype",
          "train.grad_reduce_dtype=bfloat16 needs bf16 layer gradients: train.zero_stage 3, train.dtype=bfloat16 and "
          "train.grad_accum_dtype auto or bfloat16");
  k.ranged("train.attention_block", t.attention_block);
  k.ranged("train.save_every", t.save_every);
  k.ranged("train.save_keep", t.save_keep);
  if (t.save_every > 0 && t.save_to.empty())
    k.bad("train.save_every",
          "train.save_every (" + cv_num(t.save_every) + ") needs train.save_to, the folder the checkpoints go to");
}

// Data, the profile window and fault injection.
void check_data_profile_faults(const RunConfig& c, const SectionsOk& ok, Checker& k) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const bool ok_par = ok.par;
  const auto& d = c.data;
  k.one_of("data.kind", d.kind);
  if ((d.kind == "text" || d.kind == "tokens" || d.kind == "documents") && d.path.empty())
    k.bad("data.path", "data.kind=" + d.kind + " needs data.path");
  if (d.kind == "text" && m.vocab_size < 256)
    k.bad("model.vocab_size", "model.vocab_size (" + cv_num(m.vocab_size) +
                                  ") is too small for byte-level text data, which needs at least 256");
  k.one_of("data.token_dtype", d.token_dtype);
  if (d.kind == "tokens" && d.token_dtype == "uint16" && m.vocab_size > 65536)
    k.bad("data.token_dtype",
          "uint16 tokens cannot address model.vocab_size (" + cv_num(m.vocab_size) + "); use uint32");
  if (c.profile.step_begin < 0 || c.profile.step_begin > kMaxSteps)
    k.bad("profile.step_begin", "profile.step_begin must be >= 0 and at most " + cv_num(kMaxSteps));
  if (c.profile.step_end < -1 || c.profile.step_end > kMaxSteps)
    k.bad("profile.step_end", "profile.step_end must be -1 (all) or a step number up to " + cv_num(kMaxSteps));
  else if (c.profile.step_end >= 0 && c.profile.step_end < c.profile.step_begin)
    k.bad("profile.step_end", "profile.step_end must be -1 (all) or >= profile.step_begin");
  // A window past the last step traced nothing and said nothing (a trace of 0 ranges).
  if (c.profile.enabled && c.profile.step_begin >= 0 && c.train.steps > 0 && c.profile.step_begin >= c.train.steps)
    k.bad("profile.step_begin", "profile.step_begin (" + cv_num(c.profile.step_begin) + ") is past the last step (" +
                                    cv_num(c.train.steps - 1) + ", train.steps " + cv_num(c.train.steps) +
                                    "): nothing would be traced; lower it or set profile.enabled = false");
  const auto& fl = c.faults;
  // Against the world size only when that is valid (with sp_size -2 this check would say
  // "slow_rank (-1) must be below the world size (-2)", though slow_rank -1 is off).
  if (fl.slow_rank < -1 || (ok_par && fl.slow_rank >= p.world_size()))
    k.bad("faults.slow_rank", "faults.slow_rank (" + cv_num(fl.slow_rank) +
                                  ") must be -1 (off) or a rank below the world size (" + cv_num(p.world_size()) +
                                  " = sp_size x dp_size)");
  if (!(fl.delay_ms >= 0 && fl.delay_ms <= kMaxFaultDelayMs))
    k.bad("faults.delay_ms",
          "faults.delay_ms must be between 0 and " + cv_num(static_cast<int64_t>(kMaxFaultDelayMs)) + " ms");
  else if (fl.slow_rank >= 0 && fl.delay_ms == 0)
    k.bad("faults.delay_ms",
          "faults.slow_rank is set but faults.delay_ms is 0; give the delay (e.g. 50) or set faults.slow_rank to -1");
}

}  // namespace

std::vector<ConfigIssue> validate(const RunConfig& c) {
  // Every check runs (all problems are reported), in this order (the order of the messages).
  std::vector<ConfigIssue> out;
  Checker k{out};
  SectionsOk ok = check_sizes(c, k);
  check_optimizer(c.train, k);
  check_numerics(c, ok, k);
  if (ok.all()) check_step_bytes(c, k);
  check_heads(c, ok, k);
  validate_model_family(c.model, [&](const std::string& f, const std::string& msg) { k.bad(f, msg); });
  check_techniques(c, k);
  check_data_profile_faults(c, ok, k);
  return out;
}

namespace {
std::string identity_of(const struct stat& st, const DataConfig& d, int64_t vocab_size) {
  const int64_t width = d.token_bytes();
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec) + ":" +
         std::to_string(vocab_size) + ":" + std::to_string(width);
}
}  // namespace

std::string tokens_file_identity(const std::string& path, const DataConfig& d, int64_t vocab_size) {
  struct stat st {};
  if (d.kind != "tokens" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  return identity_of(st, d, vocab_size);
}

std::string tokens_file_identity(int fd, const DataConfig& d, int64_t vocab_size) {
  struct stat st {};
  if (d.kind != "tokens" || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return {};
  return identity_of(st, d, vocab_size);
}

std::vector<ConfigIssue> validate_with_files(const RunConfig& c, FileChecks depth) {
  std::vector<ConfigIssue> out = validate(c);
  if (!out.empty()) return out;
  auto bad = [&](const std::string& field, const std::string& msg) { out.push_back({field, msg}); };
  const auto& d = c.data;
  const int64_t need_tokens = c.train.seq_length + 1;
  if (d.kind == "text" || d.kind == "tokens") {
    // Only a regular file: a FIFO would block the launcher and every worker forever.
    const std::string why = regular_file_problem(d.path);
    if (!why.empty()) {
      // A relative path is looked for in the current folder: said, with the folder (an example
      // config run from another folder said only "not found").
      std::error_code ec;
      const std::string where = !d.path.empty() && d.path[0] != '/' && why == "no such file"
                                    ? " (a relative path: looked for in the current folder " +
                                          fs::current_path(ec).string() +
                                          "; run from the folder it is relative to, or "
                                          "give an absolute path)"
                                    : std::string();
      bad("data.path",
          "data file " + d.path + (why == "no such file" ? std::string(" not found") : ": " + why) + where);
      return out;
    }
    const int64_t size = cv_file_size(d.path);
    if (size < 0) {
      bad("data.path", "data file " + d.path + " not found");
      return out;
    }
    // Readable by this user: otherwise every worker finds it only after launch, and the token-id
    // scan below reads nothing from it without a word.
    if (::access(d.path.c_str(), R_OK) != 0) {
      bad("data.path", "data file " + d.path + " cannot be read: " + std::strerror(errno));
      return out;
    }
    const int64_t width = d.kind == "text" ? 1 : (d.token_dtype == "uint16" ? 2 : 4);
    if (size % width != 0)
      bad("data.path", d.path + " has " + cv_num(size) + " bytes, not a multiple of " + cv_num(width) + " (" +
                           d.token_dtype + " tokens)");
    const int64_t tokens = size / width;
    if (tokens < need_tokens)
      bad("data.path",
          d.path + " holds " + cv_num(tokens) + " tokens, fewer than train.seq_length + 1 = " + cv_num(need_tokens));
    if (d.kind == "tokens" && out.empty() && depth == FileChecks::Full) {
      std::ifstream in(d.path, std::ios::binary);
      if (!in) {
        bad("data.path", "data file " + d.path + " cannot be read: " + std::strerror(errno));
        return out;
      }
      std::vector<char> buf(1 << 20);
      uint64_t max_id = 0;
      while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto n = in.gcount();
        for (std::streamsize i = 0; i + width <= n; i += width) {
          uint64_t v = 0;
          for (int b = 0; b < width; ++b) v |= static_cast<uint64_t>(static_cast<unsigned char>(buf[i + b])) << (8 * b);
          max_id = std::max(max_id, v);
        }
      }
      if (static_cast<int64_t>(max_id) >= c.model.vocab_size)
        bad("model.vocab_size", "model.vocab_size (" + cv_num(c.model.vocab_size) + ") is too small for " + d.path +
                                    ", whose largest token id is " + cv_num(static_cast<int64_t>(max_id)));
    }
  }
  if (d.kind == "documents") {  // the prepared folder (documents_manifest.hpp): manifest, sizes, vocabulary
    try {
      const DocumentsManifest dm = read_documents_manifest(d.path);
      const std::string why = documents_vocab_problem(dm, c.model.vocab_size, depth == FileChecks::Full);
      if (!why.empty()) bad(why.rfind("model.", 0) == 0 ? "model.vocab_size" : "data.path", why);
    } catch (const ConfigError& e) {
      bad("data.path", e.what());
    }
  }
  for (auto& i : ckpt::resume_issues(c)) out.push_back(std::move(i));  // train.resume_from
  if (!c.train.init_from.empty()) {
    const fs::path dir(c.train.init_from);
    const std::string cj = (dir / ckpt::kModelConfigFile).string();
    const std::string st = (dir / ckpt::kWeightsFile).string();
    const std::string why = regular_file_problem(st);
    if (!regular_file_problem(cj).empty())  // (load_run_config refuses this first, with the same words)
      bad("train.init_from",
          cj + " not found (expected a Hugging Face checkpoint directory with config.json and model.safetensors)");
    else if (why == "no such file") {
      const std::string idx = (dir / ckpt::kWeightsIndexFile).string();
      if (const std::string idx_why = regular_file_problem(idx); idx_why == "no such file")
        bad("train.init_from", st + " not found, nor a sharded checkpoint's " + idx);
      else if (!idx_why.empty())
        bad("train.init_from", idx + ": " + idx_why);
    } else if (!why.empty())
      bad("train.init_from", st + ": " + why);
    const bool files_there =
        std::none_of(out.begin(), out.end(), [](const ConfigIssue& i) { return i.field == "train.init_from"; });
    if (files_there) {
      try {  // the headers, and the tensors against the model's parameters, before any worker starts
        const std::string m = checkpoint_mismatch(checkpoint_tensors(c.train.init_from), c.model, c.train.init_from);
        if (!m.empty()) bad("train.init_from", m);
      } catch (const ConfigError& e) {
        bad("train.init_from", e.what());
      }
    }
  }
  return out;
}

std::string not_yet_trained(const RunConfig& cfg) {
  (void)cfg;  // every setting validate() passes is trained (ZeRO 0-3 and both offloads: docs/ZERO.md)
  return {};
}

void throw_if_invalid(const std::vector<ConfigIssue>& issues) {
  if (issues.empty()) return;
  std::string msg;
  for (const auto& i : issues) msg += (msg.empty() ? "" : "\n") + i.message;
  throw ConfigError(msg);
}

}  // namespace ulysses
