// Training-state checkpoint folders: names, manifest checks, latest complete, resume checks.
#include "checkpoint_layout.hpp"

#include "json_checked.hpp"
#include "safetensors_header.hpp"
#include "xxh64.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <cstdio>
#include <filesystem>
#include <set>

namespace ulysses::ckpt {
namespace fs = std::filesystem;

namespace {
constexpr const char* kStepPrefix = "step-";

// Keys that may change when a run is resumed (everything else must match the checkpoint).
bool free_key(const std::string& section, const std::string& key) {
  if (section == "profile" || section == "name" || section == "description") return true;
  if (section == "parallel") return key != "sp_size" && key != "dp_size";
  if (section == "train")
    return key == "steps" || key == "save_to" || key == "save_every" || key == "save_keep" || key == "resume_from" ||
           key == "init_from" || key == "device" || key == "threads_per_rank";
  return false;
}

std::string show(const json& v) { return v.is_null() ? "(absent)" : json_for_message(v); }

// What keeps optimizer.safetensors (header `h`, at `path`) from loading into AdamW state for
// these parameters, as engine/core/train_state.cpp reads it: per parameter NAME, exp_avg/NAME
// and exp_avg_sq/NAME of its shape in F32, BF16 or F16, and step/NAME one I64. "" when it
// loads. Checked before launch: the workers would find a lacking or misshapen tensor only after
// launch (3-4 s, a run folder made).
std::string optimizer_mismatch(const SafetensorsHeader& h, const ModelConfig& model, const std::string& path) {
  std::map<std::string, const SafetensorsEntry*> by_name;
  for (const auto& e : h.tensors) by_name[e.name] = &e;
  std::string missing;
  size_t n_missing = 0;
  for (const auto& p : model.parameters()) {
    for (const char* key : {"exp_avg/", "exp_avg_sq/", "step/"}) {
      const std::string name = key + p.name;
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        if (++n_missing <= 4) missing += (missing.empty() ? "" : ", ") + name;
        continue;
      }
      const SafetensorsEntry& e = *it->second;
      if (std::string(key) == "step/") {
        int64_t n = 1;
        for (int64_t d : e.shape) n = d < 0 || (d > 0 && n > INT64_MAX / d) ? -1 : n * d;
        if (e.dtype != "I64" || n != 1)
          return path + ": " + name + " has dtype " + e.dtype + " and shape " + shape_text(e.shape) +
                 "; an AdamW step count is one I64 (a damaged checkpoint)";
      } else if (!safetensors_float_dtype(e.dtype) || e.shape != p.shape) {
        return path + ": " + name + " has dtype " + e.dtype + " and shape " + shape_text(e.shape) + ", the parameter " +
               p.name + " is " + shape_text(p.shape) + " (F32, BF16 or F16): a damaged checkpoint";
      }
    }
  }
  if (n_missing > 4) missing += ", and " + std::to_string(n_missing - 4) + " more";
  return missing.empty() ? "" : path + " lacks " + missing + " (a damaged checkpoint, or another model's)";
}
}  // namespace

std::string step_dir_name(int64_t step) {
  char b[48];
  std::snprintf(b, sizeof b, "step-%08lld", static_cast<long long>(step));
  return b;
}
std::string tmp_dir_name(int64_t step) { return ".tmp-" + step_dir_name(step); }
std::string rng_file_name(int64_t rank) { return "rng-rank" + std::to_string(rank) + ".bin"; }
std::string zero_optimizer_file_name(int64_t rank) { return "optimizer-rank" + std::to_string(rank) + ".safetensors"; }

bool parse_step_dir_name(const std::string& name, int64_t* step) {
  const std::string p = kStepPrefix;
  if (name.size() <= p.size() || name.size() > p.size() + 18 || name.compare(0, p.size(), p) != 0) return false;
  int64_t v = 0;
  for (size_t i = p.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');  // at most 18 digits: no overflow
  }
  *step = v;
  return true;
}

bool is_shard_file_name(const std::string& name) {
  // model-DDDDD-of-DDDDD.safetensors
  static const std::string pre = "model-", mid = "-of-", ext = ".safetensors";
  if (name.size() != pre.size() + 5 + mid.size() + 5 + ext.size()) return false;
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i)
      if (name[i] < '0' || name[i] > '9') return false;
    return true;
  };
  const size_t d1 = pre.size(), m = d1 + 5, d2 = m + mid.size(), e = d2 + 5;
  return name.compare(0, pre.size(), pre) == 0 && digits(d1) && name.compare(m, mid.size(), mid) == 0 && digits(d2) &&
         name.compare(e, ext.size(), ext) == 0;
}

std::string model_file_held(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* f : {kWeightsFile, kWeightsIndexFile})
    if (fs::exists(fs::path(dir) / f, ec) || fs::is_symlink(fs::path(dir) / f, ec)) return f;
  std::string first;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (is_shard_file_name(n) && (first.empty() || n < first)) first = n;
  }
  return first;
}

namespace {
// `p` absolute, without symlinks, "." or ".." (as far as it exists), for comparing paths.
std::filesystem::path canonical_path(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
}
}  // namespace

std::vector<ConfigIssue> save_to_issues(const RunConfig& cfg, bool force) {
  namespace fs = std::filesystem;
  std::vector<ConfigIssue> out;
  const std::string& save_to = cfg.train.save_to;
  if (save_to.empty()) return out;
  auto say = [&](const std::string& m) { out.push_back({"train.save_to", "train.save_to: " + m}); };
  std::error_code ec;
  const fs::path st = canonical_path(save_to);
  int64_t step = 0;
  const std::string name = st.filename().string();
  if (parse_step_dir_name(name, &step) || name.rfind(".tmp-step-", 0) == 0 || fs::exists(st / kCompleteFile, ec) ||
      fs::exists(st / kStateFile, ec)) {
    say(save_to +
        " is a training checkpoint; saving the trained model into it would leave it disagreeing with its own "
        "optimizer state and step. Save to the folder that holds the checkpoints (" +
        st.parent_path().string() + ") or another folder");
    return out;
  }
  for (const char* f : {kWeightsFile, kWeightsIndexFile, kModelConfigFile}) {
    const fs::path p = fs::path(save_to) / f;
    if (fs::exists(p, ec) && !fs::is_regular_file(p, ec)) {
      say(p.string() + " is " + (fs::is_directory(p, ec) ? "a folder" : "not a regular file") +
          ", and the save writes a file of that name; remove it or pick another folder");
      return out;
    }
  }
  if (force) return out;
  const std::string held_model = model_file_held(save_to);
  if (fs::exists(fs::path(save_to) / kModelConfigFile, ec) && held_model.empty()) {
    say((fs::path(save_to) / kModelConfigFile).string() +
        " exists and is not part of a checkpoint; saving would overwrite it (pick another directory, or --force)");
    return out;
  }
  // A model or training checkpoints already there (another run's result, the init_from model
  // itself) would be overwritten, unless this run resumes from that folder.
  std::string held = held_model.empty() ? "" : "a model (" + held_model + ")";
  for (fs::directory_iterator it(save_to, ec), end; held.empty() && !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("step-", 0) == 0) held = "training checkpoints (step-*)";
  bool resumes = false;
  if (!cfg.train.resume_from.empty()) {
    const fs::path r = canonical_path(cfg.train.resume_from);
    resumes = r == st || r.parent_path() == st;
  }
  if (!held.empty() && !resumes)
    say(save_to + " already holds " + held +
        "; saving would overwrite it (pick another folder, resume from it with train.resume_from, or pass --force)");
  return out;
}

std::string checkpoint_problem(const std::string& dir) {
  const fs::path d(dir);
  const std::string marker = (d / kCompleteFile).string();
  const std::string why = regular_file_problem(marker, kMaxJsonFileBytes);
  if (why == "no such file") return "no '" + std::string(kCompleteFile) + "' marker (a half-written checkpoint?)";
  if (!why.empty()) return marker + ": " + why;
  json m;
  try {
    m = load_json_file(marker);
  } catch (const ConfigError& e) {
    return e.what();
  }
  if (!m.is_object() || !m.contains("format") || m["format"] != json(kFormat) || !m.contains("version") ||
      !m["version"].is_number_integer() || !m.contains("files") || !m["files"].is_object() || !m.contains("step") ||
      !m["step"].is_number_integer())
    return marker + " is not a " + std::string(kFormat) + " manifest";
  if (m["version"].get<int64_t>() > kFormatVersion)
    return marker + " has format version " + std::to_string(m["version"].get<int64_t>()) +
           ", newer than this build reads (" + std::to_string(kFormatVersion) + ")";
  if (m["version"].get<int64_t>() >= 2) {
    if (!m.contains("run_id") || !m["run_id"].is_string() || m["run_id"].get<std::string>().empty() ||
        !m.contains("layout") || !m["layout"].is_object() || !m.contains("xxh64") || !m["xxh64"].is_object())
      return marker + " lacks the run's identity (run_id, layout, xxh64): a damaged or hand-made manifest";
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it)
      if (!m["xxh64"].contains(it.key()) || !m["xxh64"][it.key()].is_string())
        return marker + " has no checksum for " + json_for_message(json(it.key()));
  }
  for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
    const std::string name = it.key();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      return marker + " lists an invalid file name " + json_for_message(json(name));
    if (!it.value().is_number_unsigned()) return marker + ": the size of " + name + " is not a non-negative integer";
    const std::string f = (d / name).string();
    const std::string fw = regular_file_problem(f);
    if (!fw.empty()) return f + ": " + fw;
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec || size != it.value().get<uint64_t>())
      return f + " has " + std::to_string(ec ? 0 : size) + " bytes, the manifest says " +
             std::to_string(it.value().get<uint64_t>());
  }
  return {};
}

Layout layout_of(const RunConfig& cfg) {
  Layout l;
  l.sp_size = cfg.parallel.sp_size;
  l.ring_size = cfg.parallel.ring_size;
  l.dp_size = cfg.parallel.dp_size;
  l.world_size = cfg.parallel.world_size();
  l.zero_stage = cfg.train.zero_stage;
  return l;
}

json layout_json(const Layout& l) {
  return {{"sp_size", l.sp_size},
          {"ring_size", l.ring_size},
          {"dp_size", l.dp_size},
          {"world_size", l.world_size},
          {"zero_stage", l.zero_stage}};
}

std::string layout_mismatch(const Layout& saved, const Layout& now) {
  auto say = [](const char* key, int64_t a, int64_t b) {
    return std::string(key) + " " + std::to_string(a) + " in the checkpoint, " + std::to_string(b) + " now";
  };
  if (saved.world_size != now.world_size) {
    if (saved.sp_size != now.sp_size) return say("parallel.sp_size", saved.sp_size, now.sp_size);
    if (saved.ring_size != now.ring_size) return say("parallel.ring_size", saved.ring_size, now.ring_size);
    if (saved.dp_size != now.dp_size) return say("parallel.dp_size", saved.dp_size, now.dp_size);
    return say("world size", saved.world_size, now.world_size);
  }
  if (saved.zero_stage != now.zero_stage) return say("train.zero_stage", saved.zero_stage, now.zero_stage);
  return {};
}

std::map<std::string, std::string> file_identity(const std::string& run_id, int64_t step, const std::string& file,
                                                 const Layout& layout) {
  return {{kMetaRunId, run_id},
          {kMetaStep, std::to_string(step)},
          {kMetaFile, file},
          {kMetaZeroStage, std::to_string(layout.zero_stage)},
          {kMetaWorldSize, std::to_string(layout.world_size)}};
}

json make_manifest(const std::string& dir, int64_t step, const std::string& run_id, const Layout& layout) {
  json files = json::object(), sums = json::object();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kCompleteFile) continue;
    files[name] = static_cast<uint64_t>(fs::file_size(it->path()));
    sums[name] = xxh64_file(it->path().string());
  }
  if (ec) throw ConfigError("cannot list " + dir + ": " + ec.message());
  return {{"format", kFormat}, {"version", kFormatVersion},     {"step", step},
          {"run_id", run_id},  {"layout", layout_json(layout)}, {"files", files},
          {"xxh64", sums}};
}

namespace {
// The layout a checkpoint was written for: the manifest's (version 2), else state.json's
// world_size, sp_size, dp_size and zero_stage (version 1; ring_size = the rest of the world).
Layout saved_layout(const json& manifest, const json& state) {
  Layout l;
  const json& src = manifest.contains("layout") && manifest["layout"].is_object() ? manifest["layout"] : state;
  auto get = [&](const char* k, int64_t dflt) {
    return src.is_object() && src.contains(k) && src[k].is_number_integer() ? src[k].get<int64_t>() : dflt;
  };
  l.sp_size = get("sp_size", 1);
  l.dp_size = get("dp_size", 1);
  l.world_size = get("world_size", 1);
  l.zero_stage = get("zero_stage", 0);
  const int64_t sd = l.sp_size * l.dp_size;
  l.ring_size = get("ring_size", sd > 0 && l.world_size % sd == 0 ? l.world_size / sd : 1);
  return l;
}

// The identity a file says it has against the manifest's; "" when they agree.
std::string identity_problem(const std::string& path, const std::string& name,
                             const std::map<std::string, std::string>& meta, const json& m) {
  auto said = [&](const char* k) {
    auto it = meta.find(k);
    return it == meta.end() ? std::string() : it->second;
  };
  const std::string run = m["run_id"].get<std::string>(), step = std::to_string(m["step"].get<int64_t>());
  const std::string q = json_for_message(json(said(kMetaFile)));
  if (said(kMetaRunId).empty())
    return path + " carries no run identity (" + kMetaRunId + "): not a file this checkpoint's run wrote";
  // A shard cut for another ZeRO stage or world size first: the most telling difference.
  if (name.rfind("optimizer-rank", 0) == 0) {
    const json& l = m["layout"];
    const std::string zs = l.contains("zero_stage") ? l["zero_stage"].dump() : "?";
    const std::string ws = l.contains("world_size") ? l["world_size"].dump() : "?";
    if (said(kMetaZeroStage) != zs || said(kMetaWorldSize) != ws)
      return path + " is a shard of train.zero_stage " + name_for_message(said(kMetaZeroStage)) + " over " +
             name_for_message(said(kMetaWorldSize)) + " rank(s), the checkpoint is of zero_stage " + zs + " over " + ws;
  }
  if (said(kMetaRunId) != run || said(kMetaStep) != step)
    return path + " is of run " + json_for_message(json(said(kMetaRunId))) + " step " +
           json_for_message(json(said(kMetaStep))) + ", the checkpoint of run \"" + run + "\" step " + step +
           ": a file from another run or step";
  if (said(kMetaFile) != name)
    return path + " is " + q + " of its checkpoint, not " + json_for_message(json(name)) +
           (name.rfind("optimizer-rank", 0) == 0 ? ": a shard in another rank's place" : ": a file in another's place");
  return {};
}
}  // namespace

std::string checkpoint_contents_problem(const std::string& dir) {
  const fs::path d(dir);
  json m;
  try {
    m = load_json_file((d / kCompleteFile).string());
  } catch (const ConfigError& e) {
    return e.what();
  }
  if (!m.is_object() || !m.contains("version") || !m["version"].is_number_integer() ||
      m["version"].get<int64_t>() < 2 || !m.contains("files") || !m["files"].is_object())
    return {};  // version 1: sizes only (checkpoint_problem)
  try {
    // Identity first: it names what a checksum can only call different.
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
      const std::string name = it.key(), path = (d / name).string();
      const bool st = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
      if (st) {
        const std::string why = identity_problem(path, name, read_safetensors_header_file(path).metadata, m);
        if (!why.empty()) return why;
      } else if (name == kStateFile) {
        const json state = load_json_file(path);
        std::map<std::string, std::string> meta;
        if (state.is_object() && state.contains("run_id") && state["run_id"].is_string())
          meta[kMetaRunId] = state["run_id"].get<std::string>();
        if (state.is_object() && state.contains("step") && state["step"].is_number_integer())
          meta[kMetaStep] = std::to_string(state["step"].get<int64_t>());
        meta[kMetaFile] = name;
        const std::string why = identity_problem(path, name, meta, m);
        if (!why.empty()) return why;
      }
    }
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
      const std::string path = (d / it.key()).string();
      const std::string want = m["xxh64"][it.key()].get<std::string>(), got = xxh64_file(path);
      if (got != want)
        return path + " is not the file its checkpoint saved (XXH64 " + got + ", the manifest says " + want +
               "): a file from another run or step, another rank's, or damaged";
    }
  } catch (const ConfigError& e) {
    return e.what();
  }
  return {};
}

std::vector<Checkpoint> complete_checkpoints(const std::string& save_to, std::vector<std::string>* skipped) {
  std::vector<Checkpoint> out;
  std::error_code ec;
  for (fs::directory_iterator it(save_to, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = 0;
    const std::string name = it->path().filename().string();
    if (!parse_step_dir_name(name, &step) || !it->is_directory(ec)) continue;
    const std::string why = checkpoint_problem(it->path().string());
    if (why.empty())
      out.push_back({it->path().string(), step});
    else if (skipped)
      skipped->push_back(it->path().string() + ": " + why);
  }
  std::sort(out.begin(), out.end(), [](const Checkpoint& a, const Checkpoint& b) { return a.step < b.step; });
  return out;
}

Checkpoint resolve_resume(const std::string& resume_from) {
  std::error_code ec;
  fs::path p = fs::path(resume_from).lexically_normal();
  if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();  // "dir/" -> "dir"
  if (!fs::exists(p, ec)) throw ConfigError("train.resume_from: " + resume_from + " not found");
  if (!fs::is_directory(p, ec))
    throw ConfigError("train.resume_from: " + resume_from +
                      " is not a folder (give a train.save_to folder or one step-* checkpoint in it)");
  int64_t step = 0;
  if (fs::exists(p / kCompleteFile, ec) || parse_step_dir_name(p.filename().string(), &step)) {
    // One checkpoint folder: it must be complete.
    const std::string why = checkpoint_problem(p.string());
    if (!why.empty()) throw ConfigError("train.resume_from: " + resume_from + " is not a complete checkpoint: " + why);
    const json m = load_json_file((p / kCompleteFile).string());
    return {p.string(), m["step"].get<int64_t>()};
  }
  std::vector<std::string> skipped;
  auto all = complete_checkpoints(p.string(), &skipped);
  if (all.empty()) {
    std::string msg = "train.resume_from: " + resume_from +
                      " holds no complete checkpoint (step-* folders written with train.save_every)";
    for (const auto& s : skipped) msg += "\n  skipped " + s;
    throw ConfigError(msg);
  }
  return all.back();
}

std::string resume_mismatch(const json& saved, const json& now, std::string* what) {
  std::set<std::string> sections;
  for (const json* j : {&saved, &now})
    if (j->is_object())
      for (auto it = j->begin(); it != j->end(); ++it) sections.insert(it.key());
  for (const auto& sec : sections) {
    const json a = saved.is_object() && saved.contains(sec) ? saved[sec] : json();
    const json b = now.is_object() && now.contains(sec) ? now[sec] : json();
    if (!a.is_object() || !b.is_object()) {
      if (!free_key(sec, "") && a != b) {
        if (what) *what = sec + " = " + show(b) + ", the checkpoint has " + show(a);
        return sec;
      }
      continue;
    }
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      if (free_key(sec, k)) continue;
      const json va = a.contains(k) ? a[k] : json(), vb = b.contains(k) ? b[k] : json();
      if (va != vb) {
        if (what) *what = sec + "." + k + " = " + show(vb) + ", the checkpoint has " + show(va);
        return sec + "." + k;
      }
    }
  }
  return {};
}

namespace {
// data.path as an absolute path (ulysses-run makes RUN/config.json's absolute)
void absolute_data_path(json& j) {
  if (j.is_object() && j.contains("data") && j["data"].is_object() && j["data"].contains("path") &&
      j["data"]["path"].is_string() && !j["data"]["path"].get<std::string>().empty()) {
    std::error_code ec;
    const fs::path a = fs::absolute(j["data"]["path"].get<std::string>(), ec);
    if (!ec) j["data"]["path"] = a.lexically_normal().string();
  }
}

// The saved config against the run's, then the ranks the checkpoint's files were cut for (a ring
// of 2 resumed at ring 1 has other RNG files and ZeRO shards), then every file against the
// manifest: before any rank trains. Returns the key of the first issue ("" when none).
std::string check_config_and_layout(const RunConfig& cfg, const Checkpoint& c, std::vector<ConfigIssue>& out) {
  const std::string saved_path = (fs::path(c.dir) / kRunConfigFile).string();
  json saved = load_json_file(saved_path), now = cfg.to_json();
  absolute_data_path(saved);
  absolute_data_path(now);
  std::string what;
  std::string key = resume_mismatch(saved, now, &what);
  if (!key.empty()) {
    out.push_back(
        {key, "train.resume_from: " + what + " (" + saved_path +
                  "); resume with the checkpoint's settings, only train.steps, train.save_* and the like may change"});
    return key;
  }
  const std::string state_file = (fs::path(c.dir) / kStateFile).string();
  const std::string lm = layout_mismatch(
      saved_layout(load_json_file((fs::path(c.dir) / kCompleteFile).string()), load_json_file(state_file)),
      layout_of(cfg));
  if (!lm.empty()) {
    key = lm.substr(0, lm.find(' '));
    out.push_back({key, "train.resume_from: " + lm + " (" + c.dir +
                            "); a checkpoint resumes only with the ranks it was saved by"});
    return key;
  }
  const std::string why = checkpoint_contents_problem(c.dir);
  if (!why.empty()) {
    key = "train.resume_from";
    out.push_back({key, "train.resume_from: " + why});
  }
  return key;
}

// state.json's next_step is where the ranks resume; it must be the step of the checkpoint's
// name and manifest (what train.steps is checked against). One saying 9 in step-00000002 would
// resume "at step 9", train nothing and exit 0.
void check_next_step(const Checkpoint& c, std::vector<ConfigIssue>& out) {
  const std::string state_path = (fs::path(c.dir) / kStateFile).string();
  const json st = load_json_file(state_path);
  if (!st.is_object() || !st.contains("next_step") || !st["next_step"].is_number_integer())
    out.push_back({"train.resume_from", state_path + " lacks next_step (a damaged checkpoint)"});
  else if (st["next_step"].get<int64_t>() != c.step)
    out.push_back({"train.resume_from", state_path + " says next_step " +
                                            std::to_string(st["next_step"].get<int64_t>()) +
                                            " but the checkpoint is of step " + std::to_string(c.step) +
                                            " (its folder name and manifest): a damaged or hand-edited checkpoint"});
}

// The elements of one rank's AdamW shard: ceil(params / W); stage 3 partitions each gather unit
// on its own (engine/core/zero3.hpp): the embedding, each decoder layer, the rest (final norm,
// lm_head); S = sum of ceil(n_u / W).
int64_t zero_shard_elements(const RunConfig& cfg) {
  const int64_t W = cfg.parallel.world_size(), numel = cfg.model.num_parameters();
  if (cfg.train.zero_stage < 3) return (numel + W - 1) / W;
  std::map<std::string, int64_t> unit;
  std::vector<std::string> order;
  for (const auto& prm : cfg.model.parameters()) {
    std::string u = "head";
    if (prm.name.rfind("model.embed_tokens.", 0) == 0)
      u = "embed";
    else if (prm.name.rfind("model.layers.", 0) == 0)
      u = prm.name.substr(0, prm.name.find('.', 13));
    int64_t n = 1;
    for (int64_t d : prm.shape) n *= d;
    if (!unit.count(u)) order.push_back(u);
    unit[u] += n;
  }
  int64_t S = 0;
  for (const auto& u : order) S += (unit[u] + W - 1) / W;
  return S;
}

// Each rank's AdamW shard (train.zero_stage matches the checkpoint's: checked before).
void check_zero_shards(const RunConfig& cfg, const Checkpoint& c, std::vector<ConfigIssue>& out) {
  const int64_t W = cfg.parallel.world_size(), numel = cfg.model.num_parameters();
  const int64_t S = zero_shard_elements(cfg);
  for (int64_t r = 0; r < W && r < kMaxWorld; ++r) {
    const std::string f = (fs::path(c.dir) / zero_optimizer_file_name(r)).string();
    const SafetensorsHeader h = read_safetensors_header_file(f);  // throws naming a missing file
    std::map<std::string, const SafetensorsEntry*> by;
    for (const auto& e : h.tensors) by[e.name] = &e;
    std::string why;
    for (const char* k : {"exp_avg", "exp_avg_sq"})
      if (!by.count(k) || by[k]->dtype != "F32" || by[k]->shape != std::vector<int64_t>{S})
        why = std::string(k) + " is not " + std::to_string(S) + " F32 values (the shard of " + std::to_string(numel) +
              " parameters over " + std::to_string(W) + " ranks)";
    if (!by.count("step") || by["step"]->dtype != "I64" || by["step"]->shape != std::vector<int64_t>{1})
      why = "step is not one I64";
    if (!why.empty()) {
      out.push_back({"train.resume_from", f + ": " + why + " (a damaged checkpoint)"});
      break;
    }
  }
}

// The replicated run's optimizer file: its tensors' dtypes and shapes against the model.
void check_optimizer_file(const RunConfig& cfg, const Checkpoint& c, std::vector<ConfigIssue>& out) {
  const std::string opt = (fs::path(c.dir) / kOptimizerFile).string();
  const SafetensorsHeader oh = cfg.train.zero_stage > 0
                                   ? SafetensorsHeader{}
                                   : read_safetensors_header_file(opt);  // throws naming a missing file
  const auto odd = std::find_if(oh.tensors.begin(), oh.tensors.end(), [](const SafetensorsEntry& e) {
    return !safetensors_float_dtype(e.dtype) && e.dtype != "I64";
  });
  if (odd != oh.tensors.end())
    out.push_back({"train.resume_from", opt + ": tensor " + odd->name + " has dtype " + odd->dtype +
                                            ", which the optimizer state never holds (F32, BF16, F16, I64)"});
  else if (const std::string why = cfg.train.zero_stage > 0 ? "" : optimizer_mismatch(oh, cfg.model, opt); !why.empty())
    out.push_back({"train.resume_from", why});
}

// Every rank's RNG state: present, and all of one size (one generator's state), so a lost or cut
// file is named here instead of by one worker after launch. Whether the bytes are a generator
// state only libtorch can tell (the workers do).
void check_rng_files(const RunConfig& cfg, const Checkpoint& c, std::vector<ConfigIssue>& out) {
  std::error_code ec;
  uintmax_t rng0 = 0;
  for (int64_t r = 0; r < cfg.parallel.world_size() && r < kMaxWorld; ++r) {
    const std::string f = (fs::path(c.dir) / rng_file_name(r)).string();
    const std::string fw = regular_file_problem(f, int64_t{1} << 20);
    if (!fw.empty()) {
      out.push_back({"train.resume_from", f + ": " + fw + " (rank " + std::to_string(r) + "'s RNG state)"});
      break;
    }
    const uintmax_t n = fs::file_size(f, ec);
    if (ec || n == 0 || (r > 0 && n != rng0)) {
      out.push_back(
          {"train.resume_from", f + " has " + std::to_string(ec ? 0 : n) + " bytes" +
                                    (r > 0 ? ", " + rng_file_name(0) + " " + std::to_string(rng0) : std::string()) +
                                    ": not rank " + std::to_string(r) + "'s RNG state"});
      break;
    }
    if (r == 0) rng0 = n;
  }
}
}  // namespace

std::vector<ConfigIssue> resume_issues(const RunConfig& cfg) {
  std::vector<ConfigIssue> out;
  if (cfg.train.resume_from.empty()) return out;
  try {
    const Checkpoint c = resolve_resume(cfg.train.resume_from);
    const std::string key = check_config_and_layout(cfg, c, out);
    check_next_step(c, out);
    // The model and optimizer files' headers, and the model's tensors against the run's
    // parameters, before any worker starts (the workers read what was checked here).
    if (key.empty()) {
      const std::string why = checkpoint_mismatch(checkpoint_tensors(c.dir), cfg.model, c.dir);
      if (!why.empty()) out.push_back({"train.resume_from", why});
      if (cfg.train.zero_stage > 0) check_zero_shards(cfg, c, out);
      check_optimizer_file(cfg, c, out);
      check_rng_files(cfg, c, out);
    }
    if (cfg.train.steps <= c.step)
      out.push_back({"train.steps", "train.steps (" + std::to_string(cfg.train.steps) +
                                        ") leaves nothing to train after " + c.dir + " (step " +
                                        std::to_string(c.step) + "); raise train.steps"});
  } catch (const ConfigError& e) {
    out.push_back({"train.resume_from", e.what()});
  }
  return out;
}

}  // namespace ulysses::ckpt
