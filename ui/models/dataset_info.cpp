// Prepared dataset statistics for the launcher (dataset_info.hpp).
#include "dataset_info.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "documents_manifest.hpp"

namespace ulysses::ui {

namespace {
QString json_text(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return {};
  const auto& v = j.at(key);
  if (v.is_string()) return QString::fromStdString(v.get<std::string>());
  if (v.is_null()) return {};
  return QString::fromStdString(v.dump());
}
int64_t json_count(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_number_integer() ? j.at(key).get<int64_t>() : 0;
}
}  // namespace

bool read_dataset_info(const QString& dir, DatasetInfo* info, QString* error) {
  try {
    // The engine's checks: the folder, the manifest's format and version, the files' sizes.
    const DocumentsManifest m = read_documents_manifest(dir.toStdString());
    DatasetInfo d;
    d.dir = dir;
    d.documents = m.num_documents;
    d.tokens = m.num_tokens;
    d.vocab_size = m.vocab_size;
    d.dtype = m.width == 4 ? QStringLiteral("uint32") : QStringLiteral("uint16");
    std::ifstream f(std::filesystem::path(m.dir) / "manifest.json");
    const auto j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_object()) {
      const auto tok = j.value("tokenizer", nlohmann::json::object());
      d.tokenizer_path = json_text(tok, "path");
      d.tokenizer_type = json_text(tok, "model_type");
      if (d.tokenizer_type.isEmpty()) d.tokenizer_type = json_text(tok, "kind");
      d.tokenizer_sha256 = json_text(tok, "sha256");
      const auto src = j.value("source", nlohmann::json::object());
      d.source = json_text(src, "path");
      const QString fmt = json_text(src, "format"), field = json_text(src, "text_field");
      if (!fmt.isEmpty())
        d.source +=
            QStringLiteral(" (%1%2)").arg(fmt, field.isEmpty() ? QString() : QStringLiteral(", field ") + field);
      if (j.contains("document_length_histogram") && j["document_length_histogram"].is_array())
        for (const auto& b : j["document_length_histogram"])
          d.histogram.push_back({json_count(b, "min_tokens"), json_count(b, "max_tokens"), json_count(b, "documents")});
    }
    *info = d;
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

QString dataset_info_text(const DatasetInfo& d) {
  QString t = QStringLiteral("%L1 documents, %L2 tokens (%3, vocabulary %L4)")
                  .arg(d.documents)
                  .arg(d.tokens)
                  .arg(d.dtype)
                  .arg(d.vocab_size);
  if (d.documents > 0) t += QStringLiteral(", mean %L1 tokens").arg(double(d.tokens) / double(d.documents), 0, 'f', 1);
  t += QLatin1Char('\n');
  t += QStringLiteral("Tokenizer: %1%2%3\n")
           .arg(d.tokenizer_type.isEmpty() ? QStringLiteral("(not named)") : d.tokenizer_type,
                d.tokenizer_path.isEmpty() ? QString() : QStringLiteral(", ") + d.tokenizer_path,
                d.tokenizer_sha256.isEmpty() ? QString() : QStringLiteral(", sha256 ") + d.tokenizer_sha256.left(12));
  if (!d.source.isEmpty()) t += QStringLiteral("Prepared from: %1\n").arg(d.source);
  int64_t most = 1;
  for (const auto& b : d.histogram) most = std::max(most, b.documents);
  if (!d.histogram.isEmpty()) t += QStringLiteral("Document lengths (tokens):\n");
  for (const auto& b : d.histogram) {
    if (b.documents == 0) continue;
    const int bar = int((24 * b.documents + most - 1) / most);
    t += QStringLiteral("%1–%2  %3 %L4\n")
             .arg(b.min_tokens, 7)
             .arg(b.max_tokens, -7)
             .arg(QString(bar, QChar(0x2588)))
             .arg(b.documents);
  }
  return t.trimmed();
}

}  // namespace ulysses::ui
