// Export of a run config to Hugging Face accelerate + TrainingArguments or to DeepSpeed
// (docs/CONTRACTS.md). Sources of every key name: see export_python.hpp.
#include "export_python.hpp"
#include "ulysses/common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "checkpoint_layout.hpp"
#include "run_launcher.hpp"

namespace ulysses::launch {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string n(int64_t v) { return std::to_string(v); }

const char* torch_dtype_of(const RunConfig& cfg) { return cfg.train.dtype == "bfloat16" ? "bfloat16" : "float32"; }

// Attention kernel the Python side should use: our causal attention runs over the whole
// sequence (no packed-document boundaries), which is what "sdpa" with position ids 0..N-1
// does; accelerate's docs list sdpa, flash_attention_2, flash_attention_3.
const char* sp_attn_implementation() { return "sdpa"; }

}  // namespace

std::optional<ExportTarget> parse_export_target(const std::string& name) {
  if (name == "accelerate") return ExportTarget::Accelerate;
  if (name == "deepspeed") return ExportTarget::DeepSpeed;
  return std::nullopt;
}

const char* export_target_name(ExportTarget t) { return t == ExportTarget::Accelerate ? "accelerate" : "deepspeed"; }

json training_arguments_json(const RunConfig& cfg) {
  // Field names as transformers' TrainingArguments (src/transformers/training_args.py).
  const TrainConfig& t = cfg.train;
  json a = json::object();
  a["output_dir"] = t.save_to.empty() ? "output" : t.save_to;
  if (!cfg.name.empty()) a["run_name"] = cfg.name;
  a["max_steps"] = t.steps;
  a["per_device_train_batch_size"] = t.micro_batch_size;
  a["gradient_accumulation_steps"] = t.gradient_accumulation_steps;
  a["learning_rate"] = t.lr;
  a["lr_scheduler_type"] = t.lr_scheduler_type;
  // get_cosine_with_min_lr_schedule_with_warmup takes min_lr (or min_lr_rate) as a kwarg;
  // the other schedulers take none (ours ignore min_lr as well).
  if (t.lr_scheduler_type == "cosine_with_min_lr") a["lr_scheduler_kwargs"] = {{"min_lr", t.min_lr}};
  a["warmup_steps"] = t.warmup_steps;  // an integer: exact steps (a float below 1 would be a ratio)
  a["optim"] = "adamw_torch";
  a["adam_beta1"] = t.adam_beta1;
  a["adam_beta2"] = t.adam_beta2;
  a["adam_epsilon"] = t.adam_epsilon;
  a["weight_decay"] = t.weight_decay;
  a["max_grad_norm"] = t.grad_clip;           // 0 disables clipping on both sides
  a["average_tokens_across_devices"] = true;  // token-weighted loss across ranks, as ours
  a["bf16"] = t.dtype == "bfloat16";
  a["fp16"] = false;
  a["gradient_checkpointing"] = t.activation_checkpointing == "layer";
  a["seed"] = t.seed;
  if (t.save_every > 0) {
    a["save_strategy"] = "steps";
    a["save_steps"] = t.save_every;
    a["save_total_limit"] = t.save_keep;
  } else {
    a["save_strategy"] = "no";
  }
  a["logging_steps"] = 1;
  a["logging_first_step"] = true;
  a["report_to"] = "none";
  a["dataloader_drop_last"] = true;
  a["ddp_timeout"] = static_cast<int64_t>(std::ceil(cfg.parallel.timeout_s));
  a["deepspeed"] = "ds_config.json";  // relative to the export folder (README.txt resolves it)
  return a;
}

json parallelism_config_json(const RunConfig& cfg) {
  // accelerate ParallelismConfig: dp_replicate_size x dp_shard_size x sp_size = processes;
  // our dp_size ranks each hold a full replica (plain data parallel), so dp_replicate_size.
  json handler = {
      {"sp_seq_length", cfg.train.seq_length},
      // True (accelerate's default): shapes derived from each batch. Our batches all have
      // seq_length tokens, so False would behave the same; True avoids accelerate's
      // `type=bool` command-line parsing of "false".
      {"sp_seq_length_is_variable", true},
      {"sp_attn_implementation", sp_attn_implementation()},
  };
  return {{"sp_backend", "deepspeed"},
          {"sp_size", cfg.parallel.sp_size},
          {"dp_replicate_size", cfg.parallel.dp_size},
          {"dp_shard_size", 1},
          {"sp_handler", handler}};
}

json deepspeed_config_json(const RunConfig& cfg, ExportTarget target) {
  const TrainConfig& t = cfg.train;
  json d = json::object();
  // train.zero_stage 1-3 map one to one onto DeepSpeed's stages (the same sharding, the same
  // update); 0 (our replicated state) exports stage 2, the stage accelerate's ALST support is
  // tested with: it computes the same update as a replicated AdamW.
  d["zero_optimization"] = {{"stage", t.zero_stage > 0 ? t.zero_stage : 2}};
  if (t.offload_optimizer) d["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (t.offload_params) d["zero_optimization"]["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (t.dtype == "bfloat16" && t.zero_stage >= 3) {
    // train.grad_accum_dtype / grad_reduce_dtype: the dtype each layer's gradient accumulates in
    // before its reduce-scatter, and the reduce's wire (DeepSpeed's data_types.grad_accum_dtype
    // and communication_data_type; below stage 3 neither is a setting of ours: nothing written).
    const bool bf16_grads = t.bf16_unit_grads();
    d["data_types"] = {{"grad_accum_dtype", bf16_grads ? "bf16" : "fp32"}};
    d["communication_data_type"] = bf16_grads && t.grad_reduce_dtype == "bfloat16" ? "bf16" : "fp32";
  }
  if (target == ExportTarget::Accelerate) {
    // HF Trainer fills "auto" from TrainingArguments; no optimizer/scheduler section, so
    // the Trainer's own AdamW and get_scheduler run (the same formulas as ours).
    d["train_micro_batch_size_per_gpu"] = "auto";
    d["train_batch_size"] = "auto";
    d["gradient_accumulation_steps"] = "auto";
    d["gradient_clipping"] = "auto";
    d["bf16"] = {{"enabled", "auto"}};
    return d;
  }
  d["train_micro_batch_size_per_gpu"] = t.micro_batch_size;
  d["gradient_accumulation_steps"] = t.gradient_accumulation_steps;
  // DeepSpeed's data-parallel world is world_size / sequence_parallel_size
  // (deepspeed/runtime/config.py), and train_batch_size must equal micro x accumulation x dp.
  d["train_batch_size"] = t.micro_batch_size * t.gradient_accumulation_steps * cfg.parallel.dp_size;
  d["sequence_parallel_size"] = cfg.parallel.sp_size;
  d["gradient_clipping"] = t.grad_clip;
  d["steps_per_print"] = 1;
  d["bf16"] = {{"enabled", t.dtype == "bfloat16"}};
  d["fp16"] = {{"enabled", false}};
  d["optimizer"] = {{"type", "AdamW"},
                    {"params",
                     {{"lr", t.lr},
                      {"betas", json::array({t.adam_beta1, t.adam_beta2})},
                      {"eps", t.adam_epsilon},
                      {"weight_decay", t.weight_decay}}}};
  // lr_schedules.py: warmup_num_steps must be a positive integer (DeepSpeed then uses at
  // least 2); warmup_type "linear" is step / warmup_num_steps, as Hugging Face's warmup.
  const int64_t W = std::max<int64_t>(1, t.warmup_steps);
  json s;
  if (t.lr_scheduler_type == "cosine" || t.lr_scheduler_type == "cosine_with_min_lr") {
    const double ratio = t.lr_scheduler_type == "cosine_with_min_lr" ? t.min_lr / t.lr : 0.0;
    s = {{"type", "WarmupCosineLR"},
         {"params",
          {{"total_num_steps", t.steps},
           {"warmup_min_ratio", 0.0},
           {"warmup_num_steps", W},
           {"cos_min_ratio", ratio},
           {"warmup_type", "linear"}}}};
  } else if (t.lr_scheduler_type == "linear") {
    s = {{"type", "WarmupDecayLR"},
         {"params",
          {{"total_num_steps", t.steps},
           {"warmup_min_lr", 0.0},
           {"warmup_max_lr", t.lr},
           {"warmup_num_steps", W},
           {"warmup_type", "linear"}}}};
  } else {  // constant_with_warmup
    s = {{"type", "WarmupLR"},
         {"params",
          {{"warmup_min_lr", 0.0}, {"warmup_max_lr", t.lr}, {"warmup_num_steps", W}, {"warmup_type", "linear"}}}};
  }
  d["scheduler"] = s;
  return d;
}

json ulysses_sp_registration_json(const RunConfig& cfg) {
  // deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers
  return {{"core_attn_implementation", sp_attn_implementation()},
          {"sequence_parallel_size", cfg.parallel.sp_size},
          {"micro_batch_size", cfg.train.micro_batch_size},
          {"seq_length", cfg.train.seq_length},
          {"seq_length_is_variable", true}};
}

namespace {

// The export's rows, in order; each row shows our value from the config's JSON.
struct MappingRows {
  json j;
  std::vector<ExportMapping> out;
  void add(const std::string& key, const std::string& theirs, bool diff, const std::string& note) {
    std::string value;
    const auto dot = key.find('.');
    if (dot != std::string::npos && j.contains(key.substr(0, dot)) &&
        j[key.substr(0, dot)].contains(key.substr(dot + 1)))
      value = j[key.substr(0, dot)][key.substr(dot + 1)].dump();
    out.push_back({key, value, theirs, diff, note});
  }
};

// The parallel section: sp, dp, backend, head chunks, ring, timeout.
void map_parallel(const RunConfig& cfg, bool acc, MappingRows& r) {
  const TrainConfig& t = cfg.train;
  const ParallelConfig& p = cfg.parallel;
  const std::string TA = "training_args.json: ";
  const std::string DS = "ds_config.json: ";
  const std::string PC = "parallelism_config.json: ";
  const std::string REG = "ulysses_sp.json: ";
  // ---- parallel
  r.add("parallel.sp_size",
        acc ? PC + "sp_size (sp_backend \"deepspeed\")"
            : DS + "sequence_parallel_size, " + REG + "sequence_parallel_size",
        false, "");
  r.add("parallel.dp_size",
        acc ? PC + "dp_replicate_size" : "deepspeed's data-parallel size = --num_gpus / sequence_parallel_size", false,
        (p.ring_size > 1 ? "processes = sp_size x ring_size x dp_size = " : "processes = sp_size x dp_size = ") +
            n(p.world_size()) + " (launch.sh)");
  r.add("parallel.backend", "NCCL (DeepSpeed's default)", p.backend == "gloo" || t.device == "cpu",
        p.backend == "gloo" || t.device == "cpu"
            ? "Gloo / CPU ranks have no equivalent: accelerate's and DeepSpeed's Ulysses run on CUDA GPUs with NCCL"
            : "");
  r.add("parallel.head_chunks", "", p.head_chunks > 1,
        p.head_chunks > 1
            ? "no equivalent: DeepSpeed's all-to-all moves all local heads at once (same maths; no head-chunk overlap)"
            : "1 = no chunking, as DeepSpeed");
  r.add("parallel.fused_qkv", "", p.fused_qkv,
        p.fused_qkv ? "no setting: DeepSpeed's Ulysses attention chooses its own all-to-all layout (same maths)" : "");
  r.add("parallel.ring_size", "", p.ring_size > 1,
        p.ring_size > 1
            ? "no equivalent in DeepSpeed-Ulysses or accelerate's sp_size: Ulysses x ring attention (ring " +
                  n(p.ring_size) +
                  ") has no counterpart there (accelerate's context parallelism is ring-only, on its "
                  "FSDP/TransformerEngine path): the exported launch keeps every process, so its ring "
                  "ranks become data-parallel replicas"
            : "1 = Ulysses only, as DeepSpeed");
  r.add("parallel.ring_zigzag", "", p.ring_size > 1,
        p.ring_size > 1 ? "no setting: the zigzag layout belongs to our ring attention" : "unused without a ring");
  r.add("parallel.ring_transport", "", p.ring_size > 1,
        p.ring_size > 1 ? "no setting: how our ring passes its K/V blocks (send/recv or one all-to-all per step)"
                        : "unused without a ring");
  r.add("parallel.timeout_s", acc ? TA + "ddp_timeout (whole seconds)" : "", !acc,
        acc ? "HF passes it to init_process_group, which applies it to every collective as ours"
            : "no ds_config key: pass timeout=datetime.timedelta(seconds=" +
                  n(static_cast<int64_t>(std::ceil(p.timeout_s))) + ") to deepspeed.init_distributed in your script");
}

// The train section's sequence, batch, steps and optimizer with its schedule.
void map_train_schedule(const RunConfig& cfg, bool acc, MappingRows& r) {
  const TrainConfig& t = cfg.train;
  const std::string TA = "training_args.json: ";
  const std::string DS = "ds_config.json: ";
  const std::string PC = "parallelism_config.json: ";
  const std::string REG = "ulysses_sp.json: ";
  // ---- train
  r.add("train.seq_length", acc ? PC + "sp_handler.sp_seq_length" : REG + "seq_length", true,
        "no " + std::string(acc ? "training argument" : "ds_config key") +
            " holds it: your data must give sequences of exactly " + n(t.seq_length) +
            " tokens (a multiple of sp_size), as ours");
  r.add("train.micro_batch_size",
        acc ? TA + "per_device_train_batch_size" : DS + "train_micro_batch_size_per_gpu, " + REG + "micro_batch_size",
        false, "sequences per SP group per micro-step (each rank holds seq_length/sp_size tokens of each)");
  r.add("train.steps",
        acc ? TA + "max_steps" : DS + "scheduler.params.total_num_steps (your loop runs that many optimizer steps)",
        false, "optimizer steps; there are no epochs");
  r.add("train.lr", acc ? TA + "learning_rate" : DS + "optimizer.params.lr", false, "");
  r.add("train.warmup_steps", acc ? TA + "warmup_steps" : DS + "scheduler.params.warmup_num_steps", !acc,
        acc ? ""
            : "DeepSpeed warms up over at least 2 steps (warmup_num_steps = max(2, W)); see the schedule note below");
  r.add("train.min_lr", acc ? TA + "lr_scheduler_kwargs.min_lr" : DS + "scheduler.params.cos_min_ratio = min_lr / lr",
        false,
        t.lr_scheduler_type == "cosine_with_min_lr"
            ? ""
            : "only used by cosine_with_min_lr (not the scheduler here, on both sides)");
  r.add("train.weight_decay", acc ? TA + "weight_decay" : DS + "optimizer.params.weight_decay", !acc,
        acc ? "HF excludes biases and norm weights, as ours (decay on matrices only)"
            : "DeepSpeed applies it to every parameter you pass: pass two groups, matrices and the rest with "
              "weight_decay 0 (README snippet)");
  r.add("train.grad_clip", acc ? TA + "max_grad_norm" : DS + "gradient_clipping", false,
        "0 disables clipping on both sides");
  r.add("train.gradient_accumulation_steps",
        acc ? TA + "gradient_accumulation_steps" : DS + "gradient_accumulation_steps",
        !acc && t.gradient_accumulation_steps > 1,
        acc ? "HF averages over all micro-steps' tokens (average_tokens_across_devices=true), as ours"
        : t.gradient_accumulation_steps == 1 ? ""
                                             : "DeepSpeed scales each micro-step's loss by 1/accumulation; the "
                                               "token-weighted loss over micro-steps is your loop's");
  r.add("train.adam_beta1", acc ? TA + "adam_beta1" : DS + "optimizer.params.betas[0]", false, "");
  r.add("train.adam_beta2", acc ? TA + "adam_beta2" : DS + "optimizer.params.betas[1]", false, "");
  r.add("train.adam_epsilon", acc ? TA + "adam_epsilon" : DS + "optimizer.params.eps", false, "");
  {
    const bool ours_default = t.lr_scheduler_type == "cosine_with_min_lr";
    std::string note =
        ours_default ? "our default is cosine_with_min_lr, Hugging Face's is linear: it is written explicitly. " : "";
    if (acc) {
      note += "Trainer's get_scheduler: the same formulas as ours";
    } else {
      const char* type = (t.lr_scheduler_type == "cosine" || t.lr_scheduler_type == "cosine_with_min_lr")
                             ? "WarmupCosineLR"
                         : t.lr_scheduler_type == "linear" ? "WarmupDecayLR"
                                                           : "WarmupLR";
      note +=
          std::string("DeepSpeed ") + type +
          ": its scheduler starts at iteration -1 and steps after each optimizer step (engine.py _take_model_step), so "
          "optimizer step k uses its value for k-1: the warmup is one step later (lr 0 at steps 0 and 1)" +
          (std::string(type) == "WarmupCosineLR"
               ? (t.warmup_steps >= 2
                      ? "; after warmup its cosine counts from iteration - W + 1, which cancels the lag"
                      : "; with train.warmup_steps " + std::to_string(t.warmup_steps) +
                            " DeepSpeed still warms up over 2 steps, so its whole cosine runs late (at step 10 of 20, "
                            "about 14% above ours): set train.warmup_steps to 2 or more for the same schedule")
               : "; the decay is one step later as well");
    }
    r.add("train.lr_scheduler_type", acc ? TA + "lr_scheduler_type" : DS + "scheduler.type", ours_default || !acc,
          note);
  }
}

// The train section's seed, precision, checkpoints and device.
void map_train_run(const RunConfig& cfg, bool acc, MappingRows& r) {
  const TrainConfig& t = cfg.train;
  const std::string TA = "training_args.json: ";
  const std::string DS = "ds_config.json: ";
  r.add("train.seed", acc ? TA + "seed" : "", true,
        "same seed, different numbers: our initialisation (normal(0, 0.02), biases 0, norms 1, as HF's _init_weights) "
        "and data "
        "order use our own generator; start both sides from one checkpoint (train.init_from) to compare losses step by "
        "step" +
            std::string(acc ? "" : "; call deepspeed.runtime.utils.set_random_seed(seed) in your script"));
  r.add("train.dtype", acc ? TA + "bf16" : DS + "bf16.enabled", t.dtype == "bfloat16",
        t.dtype == "bfloat16"
            ? "both keep fp32 master weights and compute in bfloat16, but round in different places (HF autocast / "
              "DeepSpeed bf16 weights vs our bf16 compute copies): losses agree to bf16 precision, not bit for bit"
            : "fp32 on both sides");
  r.add("train.init_from", t.init_from.empty() ? "" : "README: AutoModelForCausalLM.from_pretrained(init_from)", false,
        t.init_from.empty() ? "random initialisation (see train.seed)"
                            : "the same Hugging Face checkpoint loads on both sides");
  r.add("train.save_to", acc ? TA + "output_dir" : "", !acc && !t.save_to.empty(),
        acc ? "trainer.save_model() writes the final model there, as ours"
            : (t.save_to.empty()
                   ? ""
                   : "no ds_config key: save with model.save_16bit_model(save_to) or save_pretrained in your script"));
  r.add("train.save_every", acc ? TA + "save_strategy / save_steps" : "", t.save_every > 0,
        t.save_every > 0
            ? (acc ? "Trainer checkpoints (checkpoint-N/) are not our step-N/ training state: resume each run with its "
                     "own tool"
                   : "no ds_config key: call model.save_checkpoint(dir) every save_every steps; its format is not ours")
            : "off");
  r.add("train.save_keep", acc && t.save_every > 0 ? TA + "save_total_limit" : "", t.save_every > 0 && !acc,
        t.save_every > 0 && !acc ? "no ds_config key" : "");
  r.add("train.resume_from", "", !t.resume_from.empty(),
        t.resume_from.empty()
            ? ""
            : "no equivalent: our training-state checkpoints are not read by the Trainer or DeepSpeed");
  r.add("train.save_shard_bytes", "", t.save_shard_bytes > 0,
        t.save_shard_bytes > 0
            ? "no training argument: pass max_shard_size=" + n(t.save_shard_bytes) + " to save_pretrained yourself"
            : "");
  r.add("train.device", "CUDA", t.device == "cpu",
        t.device == "cpu" ? "CPU runs have no equivalent (Ulysses in accelerate/DeepSpeed needs CUDA GPUs)" : "");
  r.add("train.threads_per_rank", "", t.threads_per_rank > 0,
        t.threads_per_rank > 0 ? "CPU threads: no equivalent (set OMP_NUM_THREADS)" : "");
}

// The long-sequence memory techniques, attention kernel and ZeRO.
void map_techniques(const RunConfig& cfg, bool acc, MappingRows& r) {
  const TrainConfig& t = cfg.train;
  const std::string TA = "training_args.json: ";
  const std::string DS = "ds_config.json: ";
  r.add("train.activation_checkpointing", acc ? TA + "gradient_checkpointing" : "",
        !acc && t.activation_checkpointing == "layer",
        t.activation_checkpointing == "layer"
            ? (acc ? "per decoder layer, as ours"
                   : "no ds_config key for HF models: call model.gradient_checkpointing_enable() in your script")
            : "off");
  r.add("train.offload_activations", "", t.offload_activations,
        t.offload_activations
            ? "no equivalent in Transformers/accelerate (ALST's activation-checkpoint offload to CPU is a DeepSpeed "
              "monkey patch, see the ALST tutorial)"
            : "");
  r.add(
      "train.loss_chunk_tokens", "", t.loss_chunk_tokens > 0,
      t.loss_chunk_tokens > 0
          ? "tiled loss: no setting; Liger-Kernel's fused linear cross-entropy (TrainingArguments use_liger_kernel) or "
            "DeepSpeed's sequence_tiled_compute do the same with other tiles (same maths)"
          : "");
  r.add("train.mlp_chunk_tokens", "", t.mlp_chunk_tokens > 0,
        t.mlp_chunk_tokens > 0
            ? "TiledMLP: no setting in Transformers/accelerate; DeepSpeed's TiledMLP is a monkey patch (ALST tutorial)"
            : "");
  r.add("train.proj_chunk_tokens", "", t.proj_chunk_tokens > 0,
        t.proj_chunk_tokens > 0 ? "tiled projections, norms and RoPE around attention: no setting in "
                                  "Transformers/accelerate or DeepSpeed (same maths)"
                                : "");
  r.add("train.attention", "sp_attn_implementation \"sdpa\"", t.attention == "blocked",
        t.attention == "blocked" ? "our block-causal online-softmax kernel has no equivalent; sdpa computes the same "
                                   "attention (other rounding)"
                                 : "auto/sdpa: SDPA on both sides");
  r.add("train.attention_block", "", t.attention == "blocked",
        t.attention == "blocked" ? "block size of our kernel only" : "");
  r.add("train.zero_stage", DS + "zero_optimization.stage", t.zero_stage == 0,
        t.zero_stage == 0 ? "0 (replicated) is exported as stage 2: the same update, state sharded on their side"
                          : "the same stage (DeepSpeed's names)");
  r.add("train.offload_optimizer", DS + "zero_optimization.offload_optimizer", false,
        t.offload_optimizer ? "device cpu, pin_memory true" : "off");
  r.add("train.offload_params", DS + "zero_optimization.offload_param", false,
        t.offload_params ? "device cpu, pin_memory true" : "off");
  r.add("train.offload_gradients", DS + "zero_optimization.offload_optimizer", false,
        t.offload_gradients && t.offload_optimizer && t.zero_stage >= 3
            ? "DeepSpeed keeps the fp32 gradient partition with the offloaded optimizer, in CPU memory"
            : "on the device");
  const bool bf16_grads = t.bf16_unit_grads();
  const bool ds_keys = t.dtype == "bfloat16" && t.zero_stage >= 3;  // written only then (deepspeed_config_json)
  r.add("train.grad_accum_dtype", ds_keys ? DS + "data_types.grad_accum_dtype" : "", false,
        t.dtype != "bfloat16" ? "float32 training: float32 gradients on both sides"
        : bf16_grads          ? "bf16: each layer's gradient in bf16 until its reduce-scatter into the fp32 shard"
                              : "below stage 3 ours are fp32; no key written");
  r.add("train.gather_dtype", "", t.zero_stage >= 3 && t.dtype == "bfloat16" && t.gather_dtype == "float32",
        t.zero_stage < 3              ? "below stage 3 nothing is gathered"
        : t.dtype != "bfloat16"       ? "float32 training: fp32 gathers on both sides"
        : t.gather_dtype == "float32" ? "DeepSpeed gathers the bf16 weights; ours gather the fp32 masters (same values "
                                        "after the cast, twice the bytes)"
                                      : "both gather the bf16 weights");
  r.add("train.grad_reduce_dtype", ds_keys ? DS + "communication_data_type" : "", false,
        t.dtype != "bfloat16"                             ? "float32 training: float32 on the wire"
        : bf16_grads && t.grad_reduce_dtype == "bfloat16" ? "bf16 on the wire (sums over ranks rounded to bf16)"
                                                          : "fp32 on the wire");
  r.add("train.allocator", "PYTORCH_CUDA_ALLOC_CONF", t.allocator == "expandable",
        t.allocator == "expandable" ? "expandable_segments:True (set it in the environment, as ALST does)"
                                    : "PyTorch's caching allocator, its default");
}

// Data, profile and fault injection.
void map_data_profile_faults(const RunConfig& cfg, MappingRows& r) {
  // ---- data, profile, faults
  std::string data_note;
  if (cfg.data.kind == "synthetic")
    data_note = "our synthetic learnable stream has no Python equivalent: compare on text or tokens data. ";
  else if (cfg.data.kind == "text")
    data_note = "byte-level: each byte of the file is one token id (list(open(path, 'rb').read())). ";
  else if (cfg.data.kind == "documents")
    data_note =
        "documents of a prepared folder (tokens.bin, documents.bin offsets) packed whole into seq_length tokens: "
        "DataCollatorWithFlattening (position_ids restart per document, the first label of each document -100) "
        "with attn_implementation='flash_attention_2'. ";
  else
    data_note =
        "flat " + cfg.data.token_dtype + " token ids (numpy.memmap(path, dtype='" + cfg.data.token_dtype + "')). ";
  data_note +=
      "A sample is seq_length + 1 consecutive tokens: input_ids the first seq_length, labels pre-shifted "
      "(shift_labels) the next "
      "seq_length; our windows are picked by (seed, step, sequence index), not by a shuffled DataLoader";
  r.add("data.kind", "", true, data_note);
  r.add("data.path", "", !cfg.data.path.empty(), cfg.data.path.empty() ? "" : "your dataset code reads it");
  r.add("data.token_dtype", "", cfg.data.kind == "tokens", cfg.data.kind == "tokens" ? "see data.kind" : "");
  for (const char* k : {"profile.enabled", "profile.memory", "profile.step_begin", "profile.step_end"})
    r.add(k, "", cfg.profile.enabled && std::string(k) == "profile.enabled",
          cfg.profile.enabled && std::string(k) == "profile.enabled"
              ? "our trace store: use the PyTorch profiler or nsys there"
              : "");
  r.add("faults.slow_rank", "", cfg.faults.slow_rank >= 0,
        cfg.faults.slow_rank >= 0 ? "fault injection: no equivalent" : "off");
  r.add("faults.delay_ms", "", cfg.faults.slow_rank >= 0, cfg.faults.slow_rank >= 0 ? "see faults.slow_rank" : "");
}

}  // namespace

std::vector<ExportMapping> export_mappings(const RunConfig& cfg, ExportTarget target) {
  const bool acc = target == ExportTarget::Accelerate;
  MappingRows r{cfg.to_json(), {}};
  r.add("model.*", "config.json (Hugging Face layout, " + std::string(torch_dtype_of(cfg)) + ")", false,
        "AutoConfig / AutoModelForCausalLM.from_config read it; every model key is there");

  map_parallel(cfg, acc, r);
  map_train_schedule(cfg, acc, r);
  map_train_run(cfg, acc, r);
  map_techniques(cfg, acc, r);
  map_data_profile_faults(cfg, r);
  return r.out;
}

namespace {

std::string readme_text(const RunConfig& cfg, ExportTarget target, const std::string& raw_label) {
  const std::string label = json(raw_label).dump(-1, ' ', false, json::error_handler_t::replace);
  const bool acc = target == ExportTarget::Accelerate;
  const int64_t P = cfg.parallel.world_size();
  std::ostringstream r;
  r << "Export of " << label << " for " << (acc ? "Hugging Face accelerate + Trainer" : "DeepSpeed")
    << " (written by ulysses-run --export " << export_target_name(target) << ").\n"
    << "Ulysses sequence parallelism: sp_size " << cfg.parallel.sp_size << " x dp_size " << cfg.parallel.dp_size
    << " = " << P << " GPU processes, seq_length " << cfg.train.seq_length << ", " << cfg.train.steps
    << " optimizer steps.\n\n";
  r << "Files\n";
  r << "  config.json             the model (Hugging Face layout; AutoConfig.from_pretrained(this folder))\n";
  if (acc) {
    r << "  training_args.json      TrainingArguments(**...) keyword arguments, Hugging Face's names\n"
      << "  parallelism_config.json accelerate ParallelismConfig(...) keyword arguments; sp_handler = "
         "DeepSpeedSequenceParallelConfig(...)\n"
      << "  ds_config.json          DeepSpeed config with \"auto\" values the Trainer fills (training_args.json names "
         "it)\n";
  } else {
    r << "  ds_config.json          DeepSpeed config: sequence_parallel_size, batch, AdamW, scheduler, bf16, clipping, "
         "ZeRO\n"
      << "  ulysses_sp.json         UlyssesSPAttentionHF.register_with_transformers(...) keyword arguments\n";
  }
  r << "  launch.sh               the launch command (TRAIN_SCRIPT=your_script.py ./launch.sh)\n\n";
  r << "Launch (your training script, see below)\n";
  if (acc)
    r << "  accelerate launch --num_processes " << P << " train.py\n";
  else
    r << "  deepspeed --num_gpus " << P << " train.py --deepspeed_config ds_config.json\n";
  if (P > 8) r << "  (" << P << " processes: across machines, add your launcher's multi-node flags)\n";
  r << "\nIn train.py (needs transformers" << (acc ? ", accelerate >= 1.12" : "")
    << " and deepspeed; not part of this tool)\n";
  if (acc) {
    r << "  import json, os, torch\n"
      << "  from accelerate.utils import DeepSpeedSequenceParallelConfig, ParallelismConfig\n"
      << "  from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments\n"
      << "  d = 'EXPORT_DIR'\n"
      << "  args = json.load(open(os.path.join(d, 'training_args.json')))\n"
      << "  args['deepspeed'] = os.path.join(d, args['deepspeed'])\n"
      << "  pc = json.load(open(os.path.join(d, 'parallelism_config.json')))\n"
      << "  pc['sp_handler'] = DeepSpeedSequenceParallelConfig(**pc['sp_handler'])\n"
      << "  training_args = TrainingArguments(**args, parallelism_config=ParallelismConfig(**pc))\n";
  } else {
    r << "  import json, os, deepspeed, torch\n"
      << "  from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF, "
         "UlyssesSPDataLoaderAdapter\n"
      << "  from transformers import AutoConfig, AutoModelForCausalLM\n"
      << "  d = 'EXPORT_DIR'\n"
      << "  deepspeed.init_distributed(dist_backend='nccl')\n"
      << "  deepspeed.runtime.utils.set_random_seed(" << cfg.train.seed << ")\n";
  }
  if (cfg.train.init_from.empty())
    r << "  model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d), attn_implementation='sdpa')\n";
  else
    // fp32 weights as ours (bf16 runs keep fp32 masters too): without a dtype Transformers v5
    // loads the checkpoint's own (a bf16 Hub model trained as bf16 weights).
    r << "  model = AutoModelForCausalLM.from_pretrained(" << json(cfg.train.init_from).dump()
      << ", attn_implementation='sdpa', dtype=torch.float32)  # torch_dtype= before Transformers 4.56\n";
  if (!acc)
    r << "  mpu = UlyssesSPAttentionHF.register_with_transformers(model_name_or_path=model,\n"
      << "                                                        **json.load(open(os.path.join(d, "
         "'ulysses_sp.json'))))\n";
  if (acc) {
    r << "  Trainer(model=model, args=training_args, train_dataset=YOUR_DATASET).train()\n"
      << "  The Trainer shards each batch over the SP ranks, pre-shifts the labels and averages the loss over all\n"
      << "  valid tokens of the SP group (transformers docs/source/en/deepspeed_alst.md).\n";
  } else {
    r << "  decay = [p for p in model.parameters() if p.dim() >= 2]; rest = [p for p in model.parameters() if p.dim() "
         "< 2]\n"
      << "  engine, _, _, _ = deepspeed.initialize(config=os.path.join(d, 'ds_config.json'), model=model, mpu=mpu,\n"
      << "      model_parameters=[{'params': decay}, {'params': rest, 'weight_decay': 0.0}])\n"
      << "  then wrap your DataLoader in UlyssesSPDataLoaderAdapter and weight each rank's loss by its valid\n"
      << "  tokens with a differentiable all_gather over the SP group (DeepSpeed docs/_tutorials/\n"
      << "  ulysses-alst-sequence-parallelism.md), engine.backward(loss), engine.step().\n";
  }
  r << "\nMapping (our key = our value -> exported key)\n";
  const auto maps = export_mappings(cfg, target);
  for (const auto& m : maps) {
    r << "  " << m.ours;
    if (!m.value.empty()) r << " = " << m.value;
    r << " -> " << (m.theirs.empty() ? "(none)" : m.theirs);
    if (!m.difference && !m.note.empty()) r << "  [" << m.note << "]";
    r << "\n";
  }
  r << "\nDifferences (settings without an exact equivalent; nothing else was dropped)\n";
  for (const auto& m : maps)
    if (m.difference) r << "  - " << m.ours << (m.value.empty() ? "" : " = " + m.value) << ": " << m.note << "\n";
  if (!acc)
    r << "  - loss: DeepSpeed leaves the token-weighted SP loss to your loop (the tutorial's all_gather weighting); "
         "ours is\n"
      << "    the sum over all ranks' and micro-steps' tokens divided by their count.\n";
  r << "  - labels: our sample is seq_length + 1 tokens with seq_length targets; a Hugging Face sample of seq_length\n"
    << "    input_ids with labels = input_ids has seq_length - 1 targets unless you pass shift_labels.\n";
  return r.str();
}

std::string launch_text(const RunConfig& cfg, ExportTarget target, const std::string& raw_label) {
  const int64_t P = cfg.parallel.world_size();
  // The config's path as a JSON string: a newline in it would make the rest of the comment
  // line a command of the script.
  const std::string label = json(raw_label).dump(-1, ' ', false, json::error_handler_t::replace);
  std::ostringstream s;
  s << "#!/bin/sh\n"
    << "# Repeats " << label << " with " << (target == ExportTarget::Accelerate ? "accelerate" : "DeepSpeed") << " on "
    << P << " GPU processes (written by ulysses-run --export; see README.txt).\n"
    << "# TRAIN_SCRIPT: your training script (default train.py); extra arguments go to it.\n"
    << "set -e\n";
  if (target == ExportTarget::DeepSpeed) s << "here=$(cd \"$(dirname \"$0\")\" && pwd)\n";
  if (target == ExportTarget::Accelerate)
    s << "exec accelerate launch --num_processes " << P << " \"${TRAIN_SCRIPT:-train.py}\" \"$@\"\n";
  else
    s << "exec deepspeed --num_gpus " << P
      << " \"${TRAIN_SCRIPT:-train.py}\" --deepspeed_config \"$here/ds_config.json\" \"$@\"\n";
  return s.str();
}

}  // namespace

std::vector<ExportFile> build_export(const RunConfig& cfg, ExportTarget target, const std::string& config_label) {
  std::vector<ExportFile> files;
  auto add_json = [&](const std::string& name, const json& j) { files.push_back({name, j.dump(2) + "\n", false}); };
  add_json(ckpt::kModelConfigFile, model_to_hf_config(cfg.model, torch_dtype_of(cfg)));
  if (target == ExportTarget::Accelerate) {
    add_json("training_args.json", training_arguments_json(cfg));
    add_json("parallelism_config.json", parallelism_config_json(cfg));
  } else {
    add_json("ulysses_sp.json", ulysses_sp_registration_json(cfg));
  }
  add_json("ds_config.json", deepspeed_config_json(cfg, target));
  files.push_back({"README.txt", readme_text(cfg, target, config_label), false});
  files.push_back({"launch.sh", launch_text(cfg, target, config_label), true});
  return files;
}

std::string export_dir_problem(const std::string& dir, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) return dir + " exists and is not a directory; pick another export directory";
    if (!fs::is_empty(dir, ec) && !force)
      return dir +
             " exists and is not empty; pick another export directory, or pass --force to overwrite the export's files "
             "in it";
    if (ec) return "cannot read " + dir + ": " + ec.message();
  }
  if (const std::string why = probe_writable_dir(dir); !why.empty()) return why;
  return {};
}

void write_export(const std::vector<ExportFile>& files, const std::string& dir) {
  // Each file whole or not at all (temp file, fsync, rename); a script keeps its execute bits
  // whatever the umask. A file-size limit or a full disk is said as such (write_error.hpp).
  for (const auto& f : files)
    ulysses::write_file_atomically((fs::path(dir) / f.name).string(), f.text,
                                   ulysses::AtomicWrite{true, static_cast<mode_t>(f.executable ? 0755 : 0644)});
}

}  // namespace ulysses::launch
