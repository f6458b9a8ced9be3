// A prepared dataset folder (`ulysses data prepare`, docs/CONTRACTS.md#dataset-folder) as the
// launcher shows it: checked with the engine's own reader (read_documents_manifest, the same
// refusals a run gives) and its manifest's statistics: documents, tokens, the tokenizer's
// identity and the document-length histogram. Widget-free.
#pragma once

#include <QString>
#include <QVector>
#include <cstdint>

namespace ulysses::ui {

struct DatasetInfo {
  QString dir;
  int64_t documents = 0, tokens = 0, vocab_size = 0;
  QString dtype;  // uint16 / uint32
  // The tokenizer: its file, model type and the file's sha256 (the identity a run is checked by).
  QString tokenizer_path, tokenizer_type, tokenizer_sha256;
  QString source;  // the input it was prepared from ("docs.jsonl (jsonl, field text)")
  struct Bucket {
    int64_t min_tokens = 0, max_tokens = 0, documents = 0;
  };
  QVector<Bucket> histogram;  // document lengths, power-of-two buckets
};

// The folder's statistics, or false with *error the reason it is not a prepared dataset (the
// engine's message: "DIR/manifest.json: not found", "... is not a ulysses-documents manifest").
bool read_dataset_info(const QString& dir, DatasetInfo* info, QString* error);

// Several lines for the launcher: counts, tokenizer, source, and the histogram as bars.
QString dataset_info_text(const DatasetInfo& info);

}  // namespace ulysses::ui
