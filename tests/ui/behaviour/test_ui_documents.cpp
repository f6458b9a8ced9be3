// Documents in the studio (docs/STUDIO.md, docs/DATA.md): the report's Documents tab over rank
// files written through the real Tracer (record_documents) and read by the real loader; the
// launcher taking a prepared dataset (statistics from its manifest, data.kind/data.path set, a
// folder that is not one refused with the engine's reason); the Prepare data dialog running the
// real `ulysses-data prepare` (progress, cancel leaving nothing under the output name, the
// result offered to the launcher). Widgets driven with QTest; screenshots written to
// $ULYSSES_SCREENSHOTS when set.
#include <gtest/gtest.h>

#include <QCoreApplication>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QScrollArea>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/documents_fixture.hpp"
#include "common/e2e_util.hpp"
#include "dataset_info.hpp"
#include "explain_view.hpp"
#include "mask_model.hpp"
#include "launcher_page.hpp"
#include "main_window.hpp"
#include "prepare_dialog.hpp"
#include "tokenizer/tiny_tokenizer.hpp"
#include "trace/documents_view.hpp"
#include "trace/report_view.hpp"
#include "ulysses/common/run_layout.hpp"
#include "ulysses/profiler/trace_store.hpp"
#include "ulysses/profiler/tracer.hpp"

namespace fs = std::filesystem;
using namespace ulysses;
using namespace ulysses::ui;

namespace {

std::string scratch(const std::string& name) { return ulysses::test::scratch_path("ui_documents", name); }

void screenshot(QWidget* w, const char* name) {
  const QString dir = qEnvironmentVariable("ULYSSES_SCREENSHOTS");
  if (dir.isEmpty()) return;
  fs::create_directories(dir.toStdString());
  w->grab().save(dir + QLatin1Char('/') + QLatin1String(name));
}

// The rows of an sp-2 run whose sequence holds documents 0 (20 tokens), 1 (30) and 2 (10) and
// 4 tokens of padding (tests/e2e/test_documents_trace.cpp computes the same by hand).
std::vector<prof::DocumentShard> sp2_rows(int32_t rank, int64_t step) {
  auto row = [&](int64_t doc, int64_t len, int64_t b, int64_t e) {
    prof::DocumentShard d;
    d.rank = rank;
    d.step = step;
    d.shard_begin = rank * 32;
    d.shard_end = rank * 32 + 32;
    d.document = doc;
    d.doc_tokens = len;
    d.begin = b;
    d.end = e;
    return d;
  };
  if (rank == 0) return {row(0, 20, 0, 20), row(1, 30, 20, 50)};
  return {row(1, 30, 20, 50), row(2, 10, 50, 60), row(-1, 4, 60, 64)};
}

// Two rank files written through the Tracer, two steps each.
std::string write_run() {
  const std::string dir = scratch("run");
  fs::create_directories(dir + "/trace");
  for (int r = 0; r < 2; ++r) {
    prof::TracerOptions o;
    o.path = run_layout::rank_trace(dir, r).string();
    o.rank = r;
    o.world_size = 2;
    o.sp_rank = r;
    o.sp_size = 2;
    auto tr = prof::Tracer::open(o);
    for (int64_t s = 0; s < 2; ++s) {
      tr->begin_step(s);
      {
        prof::ScopedRange g(tr.get(), {prof::Phase::Attention, prof::Direction::Forward, 0});
        tr->record_documents(sp2_rows(r, s));
      }
      prof::StepRecord rec;
      rec.step = s;
      tr->end_step(rec);
    }
    tr->close();
  }
  return dir;
}

}  // namespace

// Written by the Tracer, read by the loader, shown by the report: the Documents tab's strip
// has a row per rank with the hand-computed blocks, and its table a line per (step, rank).
TEST(DocumentsInStudio, ReportShowsTheDocumentsOfEachRanksShard) {
  const std::string dir = write_run();
  const prof::TraceModel m = prof::load_trace(dir);
  ASSERT_EQ(m.documents.size(), 10u);  // 2 steps x (2 + 3) rows
  EXPECT_EQ(m.documents[0].document, 0);
  EXPECT_EQ(m.documents[0].rank, 0);
  ReportView report;
  report.resize(1000, 700);
  report.setDocuments(m.documents);
  ASSERT_NE(report.documentsView(), nullptr);
  EXPECT_EQ(report.tabs()->tabText(1), QStringLiteral("Documents"));
  report.tabs()->setCurrentIndex(1);
  report.show();
  DocumentsView* v = report.documentsView();
  const TableData& t = v->tableModel()->table();
  ASSERT_EQ(t.rows.size(), 4);  // (step, rank) lines
  EXPECT_EQ(t.rows[0][6].toString(), QStringLiteral("#0 [0, 20); #1 [20, 50) holds [20, 32)"));
  EXPECT_EQ(t.rows[1][6].toString(), QStringLiteral("#1 [20, 50) holds [32, 50); #2 [50, 60); padding [60, 64)"));
  int64_t len = 0;
  const auto rows = document_strip_rows(m.documents, 1, 0, &len);
  EXPECT_EQ(len, 64);
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[1].blocks.size(), 3u);
  EXPECT_EQ(rows[1].blocks[0].document, 1);
  EXPECT_EQ(rows[1].blocks[0].held_begin, 32);
  EXPECT_EQ(rows[1].blocks[0].held_end, 50);
  EXPECT_EQ(rows[1].blocks[2].document, -1);
  v->stepBox()->setValue(1);
  QTest::qWait(50);
  screenshot(&report, "studio-documents.png");
  // A trace without documents has no tab.
  report.setDocuments({});
  EXPECT_EQ(report.documentsView(), nullptr);
  EXPECT_NE(report.tabs()->tabText(1), QStringLiteral("Documents"));
}

// The launcher takes a prepared dataset: data.kind and data.path set, its statistics shown
// (documents, tokens, the tokenizer, the histogram); a folder that is not one is refused with the
// engine's reason and the form left as it was.
TEST(DocumentsInStudio, LauncherTakesAPreparedDatasetAndRefusesOtherFolders) {
  const std::string good = scratch("good");
  ulysses::test::write_documents_folder(good, {{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10}}, 256);
  LauncherPage page;
  page.resize(1280, 900);
  const QString kindBefore = page.fieldText(QStringLiteral("data.kind"));
  QString why;
  const std::string notOne = scratch("not_a_dataset");
  fs::create_directories(notOne);
  EXPECT_FALSE(page.useDataset(QString::fromStdString(notOne), &why));
  EXPECT_TRUE(why.contains(QStringLiteral("manifest.json"))) << why.toStdString();
  EXPECT_EQ(page.fieldText(QStringLiteral("data.kind")), kindBefore);
  ASSERT_TRUE(page.useDataset(QString::fromStdString(good), &why)) << why.toStdString();
  EXPECT_EQ(page.fieldText(QStringLiteral("data.kind")), QStringLiteral("documents"));
  EXPECT_EQ(page.fieldText(QStringLiteral("data.path")), QString::fromStdString(good));
  const QString info = page.datasetInfoText();
  EXPECT_TRUE(info.contains(QStringLiteral("3 documents, 10 tokens"))) << info.toStdString();
  auto* label = page.findChild<QLabel*>(QStringLiteral("datasetInfo"));
  ASSERT_NE(label, nullptr);
  EXPECT_FALSE(label->isHidden());
  // Typing another path that is no dataset says why under the field.
  page.setFieldText(QStringLiteral("data.path"), QString::fromStdString(notOne));
  EXPECT_TRUE(page.datasetInfoText().startsWith(QStringLiteral("Not a prepared dataset")))
      << page.datasetInfoText().toStdString();
}

// The dialog runs the real prepare: progress to 100%, "Use in launcher" fills the launcher with
// the dataset and its statistics (tokenizer identity and histogram from the manifest).
TEST(DocumentsInStudio, PrepareDialogPreparesAndOffersTheResultToTheLauncher) {
  qputenv("ULYSSES_DATA", ULYSSES_DATA_PATH);
  const std::string tok = ulysses::test::write_tiny_tokenizer(scratch("tok"));
  const std::string in = scratch("docs.jsonl");
  {
    std::ofstream f(in);
    for (int i = 0; i < 200; ++i)
      f << nlohmann::json{{"body", "document " + std::to_string(i) + std::string(size_t(i % 40), 'x')}}.dump() << "\n";
  }
  const std::string out = scratch("prepared");
  MainWindow w;
  PrepareDialog* d = w.prepareDialog();
  d->tokenizerEdit()->setText(QString::fromStdString(tok));
  d->inputEdit()->setText(QString::fromStdString(in));
  d->textFieldEdit()->setText(QStringLiteral("body"));
  d->outputEdit()->setText(QString::fromStdString(out));
  d->show();
  QSignalSpy done(d, &PrepareDialog::prepareFinished);
  QTest::mouseClick(d->startButton(), Qt::LeftButton);
  ASSERT_TRUE(done.wait(60000)) << d->statusLabel()->text().toStdString();
  EXPECT_TRUE(done.at(0).at(0).toBool()) << d->statusLabel()->text().toStdString();
  EXPECT_EQ(d->progressBar()->value(), 1000);
  EXPECT_TRUE(d->statusLabel()->text().startsWith(QStringLiteral("Done"))) << d->statusLabel()->text().toStdString();
  EXPECT_TRUE(fs::exists(out + "/manifest.json"));
  screenshot(d, "studio-prepare-done.png");
  ASSERT_TRUE(d->useButton()->isEnabled());
  QTest::mouseClick(d->useButton(), Qt::LeftButton);
  EXPECT_EQ(w.launcher()->fieldText(QStringLiteral("data.kind")), QStringLiteral("documents"));
  EXPECT_EQ(QFileInfo(w.launcher()->fieldText(QStringLiteral("data.path"))).canonicalFilePath(),
            QFileInfo(QString::fromStdString(out)).canonicalFilePath());
  const QString info = w.launcher()->datasetInfoText();
  EXPECT_TRUE(info.contains(QStringLiteral("200 documents"))) << info.toStdString();
  EXPECT_TRUE(info.contains(QStringLiteral("BPE"))) << info.toStdString();
  EXPECT_TRUE(info.contains(QStringLiteral("Document lengths"))) << info.toStdString();
  w.resize(1280, 900);
  w.setView(QStringLiteral("launch"));
  w.show();
  QTest::qWait(50);
  auto* info_label = w.launcher()->findChild<QLabel*>(QStringLiteral("datasetInfo"));
  ASSERT_NE(info_label, nullptr);
  EXPECT_TRUE(info_label->isVisible());
  for (QWidget* p = info_label; p; p = p->parentWidget())
    if (auto* scroll = qobject_cast<QScrollArea*>(p)) scroll->ensureWidgetVisible(info_label, 0, 200);
  QTest::qWait(50);
  screenshot(&w, "studio-launcher-dataset.png");
  // Bad input: exit 2 and the CLI's message (the file and the line) in the status line.
  const std::string bad = scratch("bad.jsonl");
  std::ofstream(bad) << "{\"body\": \"fine\"}\nnot json\n";
  d->inputEdit()->setText(QString::fromStdString(bad));
  d->outputEdit()->setText(QString::fromStdString(scratch("bad_out")));
  QTest::mouseClick(d->startButton(), Qt::LeftButton);
  ASSERT_TRUE(done.wait(60000));
  EXPECT_FALSE(done.at(1).at(0).toBool());
  EXPECT_TRUE(d->statusLabel()->text().contains(QStringLiteral("exit 2"))) << d->statusLabel()->text().toStdString();
  EXPECT_TRUE(d->statusLabel()->text().contains(QStringLiteral("bad.jsonl:2")))
      << d->statusLabel()->text().toStdString();
  EXPECT_FALSE(fs::exists(scratch("bad_out")));
}

// Cancel while prepare runs: the process stops and nothing is left under the output name.
TEST(DocumentsInStudio, CancelledPrepareLeavesNothingUnderTheOutputName) {
  qputenv("ULYSSES_DATA", ULYSSES_DATA_PATH);
  const std::string tok = ulysses::test::write_tiny_tokenizer(scratch("tok_cancel"));
  const std::string in = scratch("big.jsonl");
  {
    std::ofstream f(in);
    const std::string text(2000, 'a');
    for (int i = 0; i < 20000; ++i) f << nlohmann::json{{"text", text + std::to_string(i)}}.dump() << "\n";  // ~40 MB
  }
  const std::string out = scratch("cancelled");
  PrepareDialog d;
  d.tokenizerEdit()->setText(QString::fromStdString(tok));
  d.inputEdit()->setText(QString::fromStdString(in));
  d.outputEdit()->setText(QString::fromStdString(out));
  QSignalSpy done(&d, &PrepareDialog::prepareFinished);
  d.start();
  ASSERT_TRUE(d.running());
  // Cancel once the first progress line has come (the prepare is under way).
  QTRY_VERIFY_WITH_TIMEOUT(d.progressBar()->value() > 0 || !d.running(), 60000);
  ASSERT_TRUE(d.running()) << "finished before it could be cancelled: " << d.statusLabel()->text().toStdString();
  EXPECT_TRUE(d.statusLabel()->text().contains(QStringLiteral("ETA"))) << d.statusLabel()->text().toStdString();
  d.show();
  screenshot(&d, "studio-prepare-progress.png");
  QTest::mouseClick(d.cancelButton(), Qt::LeftButton);
  ASSERT_TRUE(done.wait(30000));
  EXPECT_FALSE(done.at(0).at(0).toBool());
  EXPECT_TRUE(d.statusLabel()->text().startsWith(QStringLiteral("Cancelled: nothing was written")))
      << d.statusLabel()->text().toStdString();
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(d.result().isEmpty());
}

// The explainer's document-mask stage, by hand: documents of 2 and 2 tokens at N = 4 keep 6 of the
// 10 causal pairs; in 2 x 2 blocks the one below the diagonal is empty (skipped). With a zigzag
// ring of 2 (chunks of one token: rank 0 holds 0 and 3, rank 1 holds 1 and 2) 4 of the 10 hop
// blocks are empty: (3, 0), (2, 1), (3, 1), (2, 0).
TEST(DocumentsInStudio, MaskStageCountsTheBlocksTheMaskEmpties) {
  const std::string dir = scratch("mask_docs");
  ulysses::test::write_documents_folder(dir, {{1, 2}, {3, 4}}, 256);
  RunConfig cfg;
  cfg.train.seq_length = 4;
  cfg.data.kind = "documents";
  cfg.data.path = dir;
  cfg.parallel.ring_size = 2;
  cfg.parallel.ring_zigzag = true;
  const DocumentMaskPicture m = document_mask_picture(cfg, 2);
  ASSERT_TRUE(m.ok);
  EXPECT_EQ(m.docs, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.causal_pairs, 10);
  EXPECT_EQ(m.live_pairs, 6);
  ASSERT_EQ(m.cells.size(), 4u);
  EXPECT_EQ(m.cells[2].live, 0);  // queries [2, 4) x keys [0, 2)
  EXPECT_EQ(m.cells[2].causal, 4);
  EXPECT_EQ(m.cells[0].live, 3);
  EXPECT_EQ(m.cells[3].live, 3);
  EXPECT_EQ(m.ring_blocks, 10);
  EXPECT_EQ(m.ring_skipped, 4);
  for (const auto& c : m.ring) {
    const bool empty = (c.q_chunk == 3 && c.kv_chunk <= 1) || (c.q_chunk == 2 && c.kv_chunk <= 1);
    EXPECT_EQ(c.live == 0, empty) << "q " << c.q_chunk << " kv " << c.kv_chunk;
  }
  // Without a prepared folder: an example sequence, the same rule.
  cfg.data.kind = "synthetic";
  cfg.train.seq_length = 64;
  const DocumentMaskPicture ex = document_mask_picture(cfg, 16);
  ASSERT_TRUE(ex.ok);
  int64_t sum = 0;
  for (const int64_t len : ex.docs) sum += len;
  EXPECT_EQ(sum, 64);
  EXPECT_LT(ex.live_pairs, ex.causal_pairs);
}

// The stage in the explainer: the last one, drawn with its texts inside the picture (the F5 check
// walks it too), for Ulysses at sp 2 and with a ring.
TEST(DocumentsInStudio, ExplainerDrawsTheMaskStage) {
  for (const int ring : {1, 2}) {
    LauncherPage page;
    page.setFieldText(QStringLiteral("parallel.sp_size"), QStringLiteral("2"));
    page.setFieldText(QStringLiteral("parallel.ring_size"), QString::number(ring));
    ExplainView v;
    v.resize(1280, 720);
    v.setConfigJson(page.configJson());
    ASSERT_TRUE(v.explanation().ok);
    ASSERT_TRUE(v.documentMask().ok);
    const int last = v.stageCount() - 1;
    EXPECT_TRUE(v.isMaskStage(last));
    EXPECT_FALSE(v.isMaskStage(last - 1));
    ASSERT_TRUE(v.setStage(last));
    v.show();
    QTest::qWait(50);
    const QImage img = v.canvas()->grab().toImage();
    bool found = false;
    for (const auto& t : v.drawnTexts()) found |= t.text.contains(QStringLiteral("causal blocks skipped"));
    EXPECT_TRUE(found);
    if (ring > 1) {
      found = false;
      for (const auto& t : v.drawnTexts()) found |= t.text.contains(QStringLiteral("hop blocks skipped"));
      EXPECT_TRUE(found);
    }
    for (const auto& t : v.drawnTexts())
      EXPECT_TRUE(QRectF(v.canvas()->rect()).contains(t.needed)) << t.text.toStdString();
    EXPECT_TRUE(v.captionText().contains(QStringLiteral("block-diagonal"))) << v.captionText().toStdString();
    screenshot(&v, ring > 1 ? "studio-explain-mask-ring.png" : "studio-explain-mask.png");
  }
}
