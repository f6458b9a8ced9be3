// The tokenized dataset folder's manifest, read and checked (see dataset_format.hpp).
#include "dataset_format.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ulysses::data {

DatasetInfo read_dataset_info(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string manifest = (fs::path(dir) / kManifestFile).string();
  std::ifstream f(manifest);
  if (!f)
    throw std::runtime_error(manifest + ": cannot be read (is " + dir + " a dataset made by `ulysses data prepare`?)");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(manifest + ": not JSON (" + e.what() + ")");
  }
  if (!m.is_object() || m.value("format", std::string()) != kDatasetFormat)
    throw std::runtime_error(manifest + ": \"format\" is not \"" + kDatasetFormat + "\"");
  if (!m.contains("version") || !m["version"].is_number_integer() || m["version"].get<int>() > kDatasetVersion)
    throw std::runtime_error(manifest + ": version " + (m.contains("version") ? m["version"].dump() : "(none)") +
                             " is not one this build reads (1); prepare the dataset again or update Ulysses");
  DatasetInfo info;
  info.dir = dir;
  try {
    info.vocab_size = m.at("vocab_size").get<uint32_t>();
    info.num_tokens = m.at("num_tokens").get<uint64_t>();
    info.num_documents = m.at("num_documents").get<uint64_t>();
    const std::string dtype = m.at("dtype").get<std::string>();
    if (dtype != "uint16" && dtype != "uint32")
      throw std::runtime_error("dtype \"" + dtype + "\" is not uint16 or uint32");
    info.token_bytes = dtype == "uint16" ? 2 : 4;
  } catch (const std::exception& e) {
    throw std::runtime_error(manifest + ": " + e.what());
  }
  std::error_code ec;
  const std::string tokens = (fs::path(dir) / kTokensFile).string();
  const std::string docs = (fs::path(dir) / kDocumentsFile).string();
  const auto tsize = fs::file_size(tokens, ec);
  if (ec || tsize != info.num_tokens * static_cast<uint64_t>(info.token_bytes))
    throw std::runtime_error(tokens + ": " + (ec ? ec.message() : std::to_string(tsize) + " bytes") +
                             ", the manifest says " + std::to_string(info.num_tokens) + " tokens of " +
                             std::to_string(info.token_bytes) + " bytes");
  const auto dsize = fs::file_size(docs, ec);
  if (ec || dsize != (info.num_documents + 1) * 8)
    throw std::runtime_error(docs + ": " + (ec ? ec.message() : std::to_string(dsize) + " bytes") +
                             ", the manifest says " + std::to_string(info.num_documents) + " documents (" +
                             std::to_string((info.num_documents + 1) * 8) + " bytes of offsets)");
  return info;
}

}  // namespace ulysses::data
