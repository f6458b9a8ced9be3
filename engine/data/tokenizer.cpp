// A Hugging Face fast tokenizer in C++ (see tokenizer.hpp).
#include "tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "bpe_model.hpp"
#include "sha256.hpp"
#include "text_steps.hpp"
#include "text_utf8.hpp"

namespace ulysses::data {

namespace {

struct AddedEntry {
  std::string content;
  uint32_t id = 0;
  bool special = false, lstrip = false, rstrip = false;
};

std::string tok_read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw TokenizerError(path + ": cannot be read (" +
                         (std::filesystem::exists(path) ? "no permission?" : "no such file") + ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A token named in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string tok_config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// The first special token of a TemplateProcessing post-processor's "single" template (also
// inside a Sequence of processors), or "".
std::string tok_template_bos(const nlohmann::json& pp) {
  if (!pp.is_object()) return "";
  if (step_type(pp) == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (const auto& p : pp["processors"])
      if (auto b = tok_template_bos(p); !b.empty()) return b;
    return "";
  }
  if (step_type(pp) != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array() ||
      pp["single"].empty())
    return "";
  const auto& first = pp["single"][0];
  if (first.contains("SpecialToken") && first["SpecialToken"].contains("id") && first["SpecialToken"]["id"].is_string())
    return first["SpecialToken"]["id"].get<std::string>();
  return "";
}

}  // namespace

struct Tokenizer::Impl {
  std::string path, sha, model_type;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedEntry> added;
  std::array<std::vector<uint32_t>, 256> added_by_first;  // indices into `added`, longest first
  std::unordered_map<std::string, uint32_t> added_ids;
  std::vector<std::string> id_to_token;
  SpecialTokens special;

  void load_added(const nlohmann::json& tj);
  void load_special(const nlohmann::json& tj, const nlohmann::json& cfg);
  std::optional<uint32_t> id_of(const std::string& token) const {
    if (auto it = added_ids.find(token); it != added_ids.end()) return it->second;
    return model->id_of(token);
  }
};

class Tokenizer::Scratch {
 public:
  TextScratch text;
  BpeScratch bpe;
  std::string section;
};

void Tokenizer::Impl::load_added(const nlohmann::json& tj) {
  id_to_token = model->tokens();
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const auto& a : tj["added_tokens"]) {
      AddedEntry e;
      if (!a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") || !a["content"].is_string())
        throw std::invalid_argument("an added_tokens entry without an id and a content");
      e.id = a["id"].get<uint32_t>();
      e.content = a["content"].get<std::string>();
      e.special = a.value("special", false);
      e.lstrip = a.value("lstrip", false);
      e.rstrip = a.value("rstrip", false);
      if (e.content.empty()) continue;
      added_ids[e.content] = e.id;
      if (e.id >= id_to_token.size()) id_to_token.resize(e.id + 1);
      id_to_token[e.id] = e.content;
      added.push_back(std::move(e));
    }
  }
  for (uint32_t i = 0; i < added.size(); ++i)
    added_by_first[static_cast<unsigned char>(added[i].content[0])].push_back(i);
  for (auto& bucket : added_by_first)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return added[a].content.size() > added[b].content.size(); });
}

void Tokenizer::Impl::load_special(const nlohmann::json& tj, const nlohmann::json& cfg) {
  special.bos_token = tok_config_token(cfg, "bos_token");
  special.eos_token = tok_config_token(cfg, "eos_token");
  const std::string template_bos =
      tok_template_bos(tj.contains("post_processor") ? tj["post_processor"] : nlohmann::json());
  if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    special.add_bos = cfg["add_bos_token"].get<bool>();
  } else if (!template_bos.empty()) {
    special.add_bos = true;
    if (special.bos_token.empty()) special.bos_token = template_bos;
  }
  if (!special.bos_token.empty()) special.bos_id = id_of(special.bos_token);
  if (!special.eos_token.empty()) special.eos_id = id_of(special.eos_token);
  if (special.add_bos && !special.bos_id)
    throw std::invalid_argument("sequences start with a BOS token, but bos_token \"" + special.bos_token +
                                "\" is not in the vocabulary");
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::from_json(const std::string& tokenizer_json, const std::string& config_json,
                                                      const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->path = name;
  impl->sha = sha256_hex(tokenizer_json);
  nlohmann::json tj, cfg;
  try {
    tj = nlohmann::json::parse(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    throw TokenizerError(name + ": not a JSON file (" + e.what() + ")");
  }
  if (!config_json.empty()) {
    try {
      cfg = nlohmann::json::parse(config_json);
    } catch (const nlohmann::json::exception& e) {
      throw TokenizerError(name + ": tokenizer_config.json beside it is not JSON (" + e.what() + ")");
    }
  }
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object())
    throw TokenizerError(name + ": not a Hugging Face tokenizer.json (no \"model\" object)");
  // Older files leave the type out of a BPE model; they are the only ones with "merges".
  const auto& m = tj["model"];
  impl->model_type = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>()
                     : m.contains("merges")                      ? "BPE"
                                                                 : "(no type)";
  if (impl->model_type != "BPE")
    throw TokenizerError(name + ": model type \"" + impl->model_type +
                         "\" is not supported (only BPE: byte-level as Llama 3 and Qwen, or with byte fallback as "
                         "Llama 2 and Mistral)");
  try {
    impl->normalizer = make_normalizer(tj.contains("normalizer") ? tj["normalizer"] : nlohmann::json());
    impl->pre_tokenizer = make_pre_tokenizer(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : nlohmann::json());
    impl->decoder = make_decoder(tj.contains("decoder") ? tj["decoder"] : nlohmann::json());
    const bool byte_level = impl->pre_tokenizer && impl->pre_tokenizer->byte_level();
    impl->model = std::make_unique<BpeModel>(m, byte_level);
    impl->load_added(tj);
    impl->load_special(tj, cfg);
  } catch (const std::invalid_argument& e) {
    throw TokenizerError(name + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw TokenizerError(name + ": " + e.what());
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw TokenizerError(path + ": no such file or folder (give a model folder or its tokenizer.json)");
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  if (!fs::exists(file, ec))
    throw TokenizerError(path +
                         ": the folder has no tokenizer.json (the Hugging Face fast-tokenizer file; a model "
                         "with only tokenizer.model, the SentencePiece file, is not supported)");
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  const std::string config_text = fs::exists(config, ec) ? tok_read_file(config.string()) : std::string();
  auto t = from_json(tok_read_file(file.string()), config_text, file.string());
  return t;
}

Tokenizer::ScratchPtr Tokenizer::make_scratch() const { return ScratchPtr(new Scratch()); }
void Tokenizer::ScratchDeleter::operator()(Scratch* s) const { delete s; }

void Tokenizer::encode(std::string_view raw, std::vector<uint32_t>& out, Scratch& s) const {
  const Impl& im = *impl_;
  std::string fixed;
  if (!is_valid_utf8(raw)) fixed = valid_utf8(raw);
  const std::string_view text = fixed.empty() ? raw : std::string_view(fixed);
  // Sections: stretches of text and the added tokens between them (leftmost, longest).
  struct Section {
    std::string_view text;
    int32_t added = -1;
  };
  std::vector<Section> sections;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -1;
    for (uint32_t k : im.added_by_first[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, im.added[k].content.size(), im.added[k].content) == 0) {
        hit = static_cast<int32_t>(k);
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back({text.substr(start, i - start)});
    sections.push_back({text.substr(i, im.added[hit].content.size()), hit});
    i += im.added[hit].content.size();
    start = i;
  }
  if (start < text.size()) sections.push_back({text.substr(start)});
  for (size_t k = 0; k < sections.size(); ++k) {
    if (sections[k].added < 0) continue;
    const AddedEntry& a = im.added[sections[k].added];
    if (a.lstrip && k > 0 && sections[k - 1].added < 0) sections[k - 1].text = trim_right(sections[k - 1].text);
    if (a.rstrip && k + 1 < sections.size() && sections[k + 1].added < 0)
      sections[k + 1].text = trim_left(sections[k + 1].text);
  }
  for (size_t k = 0; k < sections.size(); ++k) {
    if (sections[k].added >= 0) {
      out.push_back(im.added[sections[k].added].id);
      continue;
    }
    if (sections[k].text.empty()) continue;
    s.section.assign(sections[k].text);
    if (im.normalizer) im.normalizer->apply(s.section, s.text);
    if (s.section.empty()) continue;
    auto& pieces = s.text.pieces;
    pieces.clear();
    pieces.push_back(s.section);
    if (im.pre_tokenizer) im.pre_tokenizer->apply(pieces, k == 0, s.text);
    for (const std::string& p : pieces) im.model->encode_piece(p, out, s.bpe);
  }
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  auto s = make_scratch();
  std::vector<uint32_t> out;
  encode(text, out, *s);
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id >= impl_->id_to_token.size())
      throw TokenizerError("token id " + std::to_string(id) + " is past the vocabulary (" +
                           std::to_string(impl_->id_to_token.size()) + " ids)");
    tokens.push_back(impl_->id_to_token[id]);
  }
  std::string out;
  if (impl_->decoder) {
    impl_->decoder->apply(tokens);
    for (const auto& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  }
  return valid_utf8(out);
}

uint32_t Tokenizer::vocab_size() const { return static_cast<uint32_t>(impl_->id_to_token.size()); }
const std::string& Tokenizer::model_type() const { return impl_->model_type; }
const SpecialTokens& Tokenizer::special() const { return impl_->special; }
std::optional<uint32_t> Tokenizer::token_id(const std::string& token) const { return impl_->id_of(token); }
const std::string& Tokenizer::json_path() const { return impl_->path; }
const std::string& Tokenizer::sha256() const { return impl_->sha; }

}  // namespace ulysses::data
