// The studio driven programmatically (offscreen): the launcher form's validation on every
// field, config load/save/HF import, opening run folders, failure messages, the command line
// with --screenshot, and (when ulysses-run is built) real launches: a tiny run whose final
// loss in the runs list equals `ulysses-run --json`'s, and a 4-rank run that Stop ends with
// no worker left and a readable trace.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <signal.h>
#include <sqlite3.h>

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QGroupBox>
#include <QTemporaryDir>
#include <QTest>

#include "checkpoint_layout.hpp"
#include "compare_model.hpp"
#include "form_fields.hpp"
#include "device_decision.hpp"
#include "estimate_model.hpp"
#include "launch_form.hpp"
#include "launcher_page.hpp"
#include "main_window.hpp"
#include "metric_chart.hpp"
#include "trace/trace_view.hpp"
#include "monitor_page.hpp"
#include "rank_status_model.hpp"
#include "run_controller.hpp"
#include "runs_model.hpp"
#include "runs_page.hpp"
#include "run_data.hpp"
#include "ui/run_fixture.hpp"

using namespace ulysses::ui;

namespace {

const QString kTiny = QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs/tiny.json");

QString ulyssesRun() {
  const QString env = qEnvironmentVariable("ULYSSES_RUN");
  const QString p = env.isEmpty() ? QStringLiteral(ULYSSES_RUN_PATH) : env;
  const QFileInfo fi(p);
  return fi.isFile() && fi.isExecutable() ? fi.absoluteFilePath() : QString();
}

// The worker ulysses-run would start (CONTRACTS.md): $ULYSSES_WORKER, next to ulysses-run, ../worker/.
bool workerFound(const QString& runExe) {
  const QString env = qEnvironmentVariable("ULYSSES_WORKER");
  if (!env.isEmpty()) return QFileInfo(env).isExecutable();
  const QDir d = QFileInfo(runExe).absoluteDir();
  return QFileInfo(d.filePath("ulysses-worker")).isExecutable() ||
         QFileInfo(d.filePath("../worker/ulysses-worker")).isExecutable();
}

#define SKIP_WITHOUT_ULYSSES_RUN()                                                                             \
  const QString runExe = ulyssesRun();                                                                         \
  if (runExe.isEmpty()) GTEST_SKIP() << "ulysses-run is not built (" ULYSSES_RUN_PATH "; or set ULYSSES_RUN)"; \
  if (!workerFound(runExe)) GTEST_SKIP() << "ulysses-worker is not built (engine off?); or set ULYSSES_WORKER"

void writeFile(const QString& path, const QByteArray& data) {
  QDir().mkpath(QFileInfo(path).absolutePath());
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate)) << path.toStdString();
  f.write(data);
}

class Studio : public ::testing::Test {
 protected:
  void SetUp() override {
    QSettings().clear();
    ASSERT_TRUE(tmp.isValid());
    w = std::make_unique<MainWindow>();
    w->setQuiet(true);
    w->setRunsDir(tmp.filePath("runs"));
    w->resize(1400, 900);
    w->show();  // offscreen: buttons get a size, so clicks land on them
    ASSERT_TRUE(QTest::qWaitForWindowExposed(w.get()));
    L = w->launcher();
    QString err;
    ASSERT_TRUE(L->loadConfigFile(kTiny, &err)) << err.toStdString();
  }
  void TearDown() override {
    if (w && w->controller()->isRunning()) {
      QSignalSpy done(w->controller(), &RunController::finished);
      w->controller()->stop(5000);
      done.wait(30000);
    }
    w.reset();
  }
  QTemporaryDir tmp;
  std::unique_ptr<MainWindow> w;
  LauncherPage* L = nullptr;
};

TEST_F(Studio, TinyConfigIsValid) {
  EXPECT_TRUE(L->isValid()) << L->generalIssues().toStdString();
  EXPECT_TRUE(L->launchButton()->isEnabled());
  EXPECT_EQ(L->fieldText("parallel.sp_size"), "2");
  EXPECT_EQ(L->configName(), "tiny CPU demo");
  // data.path is resolved against the repository, so it exists from any working directory.
  EXPECT_TRUE(QFileInfo(L->fieldText("data.path")).isAbsolute());
  EXPECT_TRUE(QFileInfo::exists(L->fieldText("data.path")));
  EXPECT_TRUE(L->estimateModel()->hasEstimate());
}

// The form's boxes: the memory techniques (ZeRO and offload with recompute and tiling), ring
// attention and checkpoints each have a box of their own; the rest sit in their section's.
TEST_F(Studio, ZeroRingAndCheckpointFieldsHaveGroupsOfTheirOwn) {
  auto boxOf = [&](const char* dotted) -> QString {
    for (QWidget* p = L->fieldWidget(QString::fromLatin1(dotted)); p; p = p->parentWidget())
      if (auto* box = qobject_cast<QGroupBox*>(p)) return box->title();
    return {};
  };
  for (const char* k : {"train.zero_stage", "train.offload_optimizer", "train.offload_params",
                        "train.activation_checkpointing", "train.mlp_chunk_tokens"})
    EXPECT_TRUE(boxOf(k).startsWith(QStringLiteral("Memory"))) << k << " in " << boxOf(k).toStdString();
  EXPECT_TRUE(boxOf("parallel.ring_size").startsWith(QStringLiteral("Ring attention")));
  EXPECT_TRUE(boxOf("parallel.ring_zigzag").startsWith(QStringLiteral("Ring attention")));
  EXPECT_TRUE(boxOf("train.resume_from").startsWith(QStringLiteral("Checkpoints")));
  EXPECT_EQ(boxOf("parallel.sp_size"), QStringLiteral("Parallelism"));
  EXPECT_EQ(boxOf("train.seq_length"), QStringLiteral("Training"));
  EXPECT_EQ(boxOf("data.kind"), QStringLiteral("Data"));
}

// Keys the form has no field for (Qwen3's head_dim, yarn RoPE, model_type) are kept from the
// loaded config, not replaced by defaults: the run launched is the config that was loaded.
TEST_F(Studio, KeysWithoutAFormFieldSurviveTheForm) {
  QString err;
  ASSERT_TRUE(L->loadConfigFile(QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs/qwen3-tiny.json"), &err))
      << err.toStdString();
  ASSERT_TRUE(L->isValid()) << L->generalIssues().toStdString();
  const auto j = L->configJson();
  EXPECT_EQ(j["model"]["model_type"], "qwen3");
  EXPECT_EQ(j["model"]["head_dim"], 32);
  EXPECT_EQ(j["model"]["rope_type"], "yarn");
  EXPECT_EQ(j["model"]["rope_factor"], 4.0);
  EXPECT_EQ(j["train"]["gradient_accumulation_steps"], 2);
  // a form edit keeps them too
  L->setFieldText(QStringLiteral("train.steps"), QStringLiteral("7"));
  const auto k = L->configJson();
  EXPECT_EQ(k["train"]["steps"], 7);
  EXPECT_EQ(k["model"]["head_dim"], 32);
  EXPECT_EQ(k["model"]["model_type"], "qwen3");
}

// The form is generated from the config's own field table: its keys are the table's keys
// with a form field, those plus the table's "no field" keys are exactly the keys the parser
// knows (RunConfig::to_json), each widget fits the kind, and each choice box offers exactly
// the table's choices.
TEST_F(Studio, FormKeysEqualConfigKeys) {
  std::set<std::string> parser, form, table_form, table_all;
  const auto j = ulysses::RunConfig{}.to_json();
  for (auto s = j.begin(); s != j.end(); ++s)
    if (s.value().is_object())
      for (auto k = s.value().begin(); k != s.value().end(); ++k) parser.insert(s.key() + "." + k.key());
  for (const auto& f : L->fieldNames()) EXPECT_TRUE(form.insert(f.toStdString()).second) << f.toStdString();
  for (const auto& f : ulysses::config_fields()) {
    table_all.insert(f.dotted());
    if (f.in_form) table_form.insert(f.dotted());
  }
  EXPECT_EQ(form, table_form);
  EXPECT_EQ(table_all, parser);
  for (const auto& k : parser)
    EXPECT_TRUE(form.count(k) || !ulysses::find_config_field(k)->in_form)
        << k << ": a config key with neither a form field nor a 'no field' row";
  int choices = 0;
  for (const auto& f : ulysses::config_fields()) {
    if (!f.in_form) {
      EXPECT_EQ(L->fieldWidget(QString::fromStdString(f.dotted())), nullptr) << f.dotted();
      continue;
    }
    QWidget* w = L->fieldWidget(QString::fromStdString(f.dotted()));
    ASSERT_NE(w, nullptr) << f.dotted();
    switch (f.kind) {
      case ulysses::FieldKind::Check:
        EXPECT_NE(qobject_cast<QCheckBox*>(w), nullptr) << f.dotted();
        break;
      case ulysses::FieldKind::Choice: {
        auto* c = qobject_cast<QComboBox*>(w);
        ASSERT_NE(c, nullptr) << f.dotted();
        std::vector<std::string> items;
        for (int i = 0; i < c->count(); ++i) items.push_back(c->itemText(i).toStdString());
        EXPECT_EQ(items, f.choices) << f.dotted();
        ++choices;
        break;
      }
      default:
        EXPECT_NE(qobject_cast<QLineEdit*>(w), nullptr) << f.dotted();
    }
  }
  EXPECT_GE(choices, 8);
}

// The form model (ui/models/launch_form, no widget) words nothing itself: for a bad setting
// its message, and the one the page shows, equal the engine's for the same config
// (validate_with_files, decide_device, the parser's type error).
TEST_F(Studio, FormMessagesAreTheEngines) {
  const QHash<QString, QString> base = [&] {
    QHash<QString, QString> h;
    for (const auto& f : L->fieldNames()) h.insert(f, L->fieldText(f));
    return h;
  }();
  const DeviceScan noGpu;  // no GPU found
  L->setDevices(noGpu);
  struct Case {
    QString field, value, engineField;
  };
  const QVector<Case> cases = {{"parallel.sp_size", "3", "parallel.sp_size"},
                               {"model.num_key_value_heads", "3", "model.num_key_value_heads"},
                               {"parallel.head_chunks", "3", "parallel.head_chunks"},
                               {"train.device", "cuda", "train.device"},
                               {"parallel.backend", "nccl", "parallel.backend"},
                               {"data.path", "/nonexistent/corpus.txt", "data.path"},
                               {"train.init_from", "/nonexistent/ckpt", "train.init_from"},
                               {"train.steps", "abc", "train.steps"},
                               {"train.lr", "\"4\"", "train.lr"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field.toStdString() + "=" + c.value.toStdString());
    QHash<QString, QString> texts = base;
    texts[c.field] = c.value;
    if (c.field == "data.path") texts["data.kind"] = "text";
    const auto check = checkLaunchForm(
        L->configJson(), "t", [&](const QString& f) { return texts.value(f); }, noGpu);
    EXPECT_FALSE(check.config.has_value());
    // The engine on the same config, as ulysses-run checks it.
    std::vector<std::string> engine;
    ulysses::json j = check.config_json;
    const auto* spec = ulysses::find_config_field(c.field.toStdString());
    j[spec->section][spec->key] = ulysses::field_value_from_text(*spec, c.value.toStdString());
    try {
      const auto cfg = ulysses::RunConfig::from_json(j);
      auto issues = ulysses::validate_with_files(cfg);
      ulysses::DeviceFacts facts;
      facts.build_has_cuda = ulysses::build_has_cuda();
      facts.local_world_size = static_cast<int>(cfg.parallel.world_size());
      ulysses::decide_device(cfg, facts, &issues);
      for (const auto& i : issues)
        if (i.field == c.engineField.toStdString()) engine.push_back(i.message);
    } catch (const ulysses::ConfigError& e) {
      engine.push_back(e.what());
    }
    ASSERT_FALSE(engine.empty()) << "the engine accepts it";
    ASSERT_TRUE(check.field_errors.contains(c.engineField));
    const QString model = check.field_errors.value(c.engineField).join('\n');
    // device messages name where the GPU count came from, which differs (scan vs /proc); the rest is equal
    QStringList wantAll;
    for (const auto& m : engine) wantAll << QString::fromStdString(m);
    const QString want = wantAll.join('\n');
    if (c.field == "train.device" || c.field == "parallel.backend")
      EXPECT_TRUE(model.startsWith(want.left(want.indexOf('('))))
          << model.toStdString() << " vs " << want.toStdString();
    else
      EXPECT_EQ(model, want);
    // the page shows the model's message
    if (c.field == "data.path") L->setFieldText("data.kind", "text");
    L->setFieldText(c.field, c.value);
    EXPECT_EQ(L->fieldError(c.engineField), model);
    EXPECT_FALSE(L->launchButton()->isEnabled());
    for (auto it = base.begin(); it != base.end(); ++it) L->setFieldText(it.key(), it.value());
    EXPECT_TRUE(L->isValid()) << L->generalIssues().toStdString();
  }
}

// Every free-text field refuses text that is not its type, with a message next to it.
TEST_F(Studio, NonNumbersGetInlineMessageInEveryField) {
  int checked = 0;
  for (const auto& f : L->fieldNames()) {
    auto* e = qobject_cast<QLineEdit*>(L->fieldWidget(f));
    const auto spec =
        std::find_if(configFields().begin(), configFields().end(), [&](const FieldSpec& x) { return x.dotted() == f; });
    if (!e || spec == configFields().end() || (spec->kind != FieldKind::Integer && spec->kind != FieldKind::Number))
      continue;
    const QString keep = e->text();
    for (const QString& bad : {QStringLiteral("abc"), QString(), QStringLiteral("[1]"), QStringLiteral("\"4\"")}) {
      e->setText(bad);
      EXPECT_FALSE(L->fieldError(f).isEmpty()) << f.toStdString() << " accepted '" << bad.toStdString() << "'";
      EXPECT_FALSE(L->launchButton()->isEnabled()) << f.toStdString();
      EXPECT_FALSE(L->isValid());
    }
    e->setText(keep);
    EXPECT_TRUE(L->fieldError(f).isEmpty()) << f.toStdString() << ": " << L->fieldError(f).toStdString();
    EXPECT_TRUE(L->launchButton()->isEnabled()) << f.toStdString();
    ++checked;
  }
  EXPECT_GE(checked, 25);
}

// Values of the right type that the engine's rules refuse: the message sits on that field.
// train.save_to as ulysses-run refuses it before launch shows on the form's field (not "Ready"
// for a launch that will be refused): a folder holding a model or a lone config.json, and a
// config.json that is a folder. The messages are ckpt::save_to_issues', which ulysses-run prints.
TEST_F(Studio, SaveToRefusalsOfTheLauncherShowOnTheForm) {
  const DeviceScan noGpu;
  L->setDevices(noGpu);
  QHash<QString, QString> texts;
  for (const auto& f : L->fieldNames()) texts.insert(f, L->fieldText(f));
  const QString held = tmp.filePath("held"), lone = tmp.filePath("lone"), dir = tmp.filePath("dir");
  writeFile(held + "/model.safetensors", "theirs");
  writeFile(lone + "/config.json", "{}");
  ASSERT_TRUE(QDir().mkpath(dir + "/config.json"));
  for (const auto& [path, says] :
       {std::pair{held, QString("already holds a model (model.safetensors)")},
        std::pair{lone, QString("exists and is not part of a checkpoint")},
        std::pair{dir, QString("config.json is a folder, and the save writes a file of that name")}}) {
    texts["train.save_to"] = path;
    const auto check = checkLaunchForm(
        L->configJson(), "t", [&](const QString& f) { return texts.value(f); }, noGpu);
    EXPECT_FALSE(check.config.has_value()) << path.toStdString();
    ASSERT_TRUE(check.field_errors.contains("train.save_to")) << path.toStdString();
    const QString msg = check.field_errors.value("train.save_to").join('\n');
    EXPECT_TRUE(msg.contains(says)) << msg.toStdString();
    ulysses::RunConfig cfg = ulysses::RunConfig::from_json(check.config_json);
    const auto issues = ulysses::ckpt::save_to_issues(cfg, false);
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_EQ(msg, QString::fromStdString(issues.front().message));
  }
  texts["train.save_to"] = tmp.filePath("fresh");  // a new folder: nothing to say
  const auto ok = checkLaunchForm(
      L->configJson(), "t", [&](const QString& f) { return texts.value(f); }, noGpu);
  EXPECT_FALSE(ok.field_errors.contains("train.save_to"));
}

// A fine-tune config (train.init_from, no model section) loads with the checkpoint's model, as
// ulysses-run reads it (not our defaults and a shape mismatch); a model key that differs
// from the checkpoint's is the error ulysses-run gives, on that key's field (not "Ready" for a
// launch that will be refused).
TEST_F(Studio, AFineTuneConfigTakesTheCheckpointsModel) {
  SKIP_WITHOUT_ULYSSES_RUN();
  const QString ckpt = tmp.filePath("ckpt");
  QProcess p;
  p.setWorkingDirectory(QStringLiteral(ULYSSES_SOURCE_DIR));  // tiny.json's data path is relative to it
  p.start(runExe, {kTiny, "--set", "train.steps=1", "--set", "train.seq_length=64", "--set", "train.save_to=" + ckpt,
                   "--out", tmp.filePath("ckrun")});
  ASSERT_TRUE(p.waitForFinished(120000));
  ASSERT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  const QString cfg = tmp.filePath("finetune.json");
  writeFile(cfg, QStringLiteral(R"({"train": {"init_from": "%1", "steps": 2, "seq_length": 64},
                                   "data": {"kind": "synthetic"}})")
                     .arg(ckpt)
                     .toUtf8());
  QString err;
  ASSERT_TRUE(L->loadConfigFile(cfg, &err)) << err.toStdString();
  const auto tiny = ulysses::load_run_config(kTiny.toStdString());
  EXPECT_EQ(L->fieldText("model.hidden_size"), QString::number(tiny.model.hidden_size));
  EXPECT_EQ(L->fieldText("model.num_key_value_heads"), QString::number(tiny.model.num_key_value_heads));
  EXPECT_TRUE(L->isValid()) << L->generalIssues().toStdString();
  // A key the checkpoint disagrees with.
  writeFile(cfg, QStringLiteral(R"({"model": {"rms_norm_eps": 0.5}, "train": {"init_from": "%1", "steps": 2,
                                   "seq_length": 64}, "data": {"kind": "synthetic"}})")
                     .arg(ckpt)
                     .toUtf8());
  ASSERT_TRUE(L->loadConfigFile(cfg, &err)) << err.toStdString();
  EXPECT_FALSE(L->isValid());
  const auto check = checkLaunchForm(
      L->configJson(), "t", [&](const QString& f) { return L->fieldText(f); }, DeviceScan{});
  ASSERT_TRUE(check.field_errors.contains("model.rms_norm_eps")) << check.general.join('\n').toStdString();
  EXPECT_TRUE(check.field_errors.value("model.rms_norm_eps").join('\n').contains("differs from")) << "";
}

TEST_F(Studio, EngineRulesShowOnTheOffendingField) {
  const QVector<QPair<QString, QString>> cases = {
      {"model.vocab_size", "0"},
      {"model.hidden_size", "66"},
      {"model.intermediate_size", "0"},
      {"model.num_hidden_layers", "-1"},
      {"model.num_attention_heads", "0"},
      {"model.num_key_value_heads", "3"},
      {"model.rms_norm_eps", "0"},
      {"model.rope_theta", "-1"},
      {"model.max_position_embeddings", "1.5"},
      {"model.tie_word_embeddings", "?"},
      {"parallel.sp_size", "3"},
      {"parallel.dp_size", "0"},
      {"parallel.head_chunks", "3"},
      {"parallel.backend", "mpi"},
      {"parallel.timeout_s", "0"},
      {"train.seq_length", "511"},
      {"train.micro_batch_size", "0"},
      {"train.steps", "0"},
      {"train.lr", "0"},
      {"train.warmup_steps", "-1"},
      {"train.min_lr", "1"},
      {"train.weight_decay", "-0.1"},
      {"train.grad_clip", "-1"},
      {"train.seed", "x"},
      {"train.dtype", "float16"},
      {"train.device", "tpu"},
      {"train.threads_per_rank", "-2"},
      {"train.init_from", "/nonexistent/ckpt"},
      {"data.kind", "csv"},
      {"data.path", "/nonexistent/corpus.txt"},
      {"data.token_dtype", "uint8"},
      {"profile.step_begin", "-1"},
      {"profile.enabled", "?"},
      {"train.save_to", ""},
  };
  for (const auto& [field, value] : cases) {
    if (value == "?" || field == "train.save_to")
      continue;  // check boxes cannot hold a wrong value; save_to has no rule
    const QString keep = L->fieldText(field);
    ASSERT_TRUE(L->setFieldText(field, value)) << field.toStdString();
    EXPECT_FALSE(L->fieldError(field).isEmpty())
        << field.toStdString() << "=" << value.toStdString() << " was accepted";
    EXPECT_FALSE(L->launchButton()->isEnabled()) << field.toStdString();
    L->setFieldText(field, keep);
    EXPECT_TRUE(L->launchButton()->isEnabled())
        << field.toStdString() << " stays invalid: " << L->fieldError(field).toStdString();
  }
  // The message is the engine's own wording.
  L->setFieldText("parallel.sp_size", "3");
  EXPECT_TRUE(L->fieldError("parallel.sp_size").contains("must be divisible by parallel.sp_size (3)"))
      << L->fieldError("parallel.sp_size").toStdString();
  L->setFieldText("parallel.sp_size", "2");
  // profile.step_end before step_begin.
  L->setFieldText("profile.step_begin", "5");
  L->setFieldText("profile.step_end", "2");
  EXPECT_FALSE(L->fieldError("profile.step_end").isEmpty());
  EXPECT_FALSE(L->launchButton()->isEnabled());
}

// Nothing typed into any field crashes the form; Launch is enabled exactly when the form is
// valid; whatever the form accepts the engine's own rules accept too (RunConfig::from_json and
// validate() on the form's JSON, an independent judge); and text that is no value at all is
// refused in every numeric field.
TEST_F(Studio, NoCrashOnAnyInput) {
  const QStringList nasty = {"1e999",
                             "-1e999",
                             "99999999999999999999",
                             "-9223372036854775808",
                             "9223372036854775807",
                             "nan",
                             "inf",
                             "{}",
                             "null",
                             "true",
                             "0x10",
                             "１２",
                             "1e-400",
                             " 4 ",
                             "4 4",
                             "\\",
                             "\"",
                             QString(5000, '9'),
                             "-0",
                             "0.0",
                             "1e18"};
  const QStringList never = {"{}", "4 4", "\\", "\"", "nan", "inf", "1e999"};  // no number, no path, no name
  int numeric_fields = 0, accepted = 0;
  for (const auto& f : L->fieldNames()) {
    auto* e = qobject_cast<QLineEdit*>(L->fieldWidget(f));
    if (!e) continue;
    const QString keep = e->text();
    bool number = false;
    keep.toDouble(&number);
    numeric_fields += number;
    for (const auto& v : nasty) {
      e->setText(v);
      const std::string where = f.toStdString() + "=" + v.left(20).toStdString();
      EXPECT_EQ(L->launchButton()->isEnabled(), L->isValid()) << where;
      if (number && never.contains(v)) {
        EXPECT_FALSE(L->isValid()) << where << " was accepted in a numeric field";
      }
      if (!L->isValid()) continue;
      ++accepted;
      std::string refused;
      try {
        const auto cfg = ulysses::RunConfig::from_json(L->configJson());
        for (const auto& issue : ulysses::validate(cfg)) refused += issue.field + ": " + issue.message + "; ";
      } catch (const std::exception& ex) {
        refused = ex.what();
      }
      EXPECT_TRUE(refused.empty()) << where << ": the form accepted what the engine refuses: " << refused;
    }
    e->setText(keep);
  }
  EXPECT_GT(numeric_fields, 10);  // the form's numeric fields were all tried
  EXPECT_GT(accepted, 0);         // and some inputs (" 4 ", "-0", ...) were accepted and judged
  EXPECT_TRUE(L->isValid());
}

TEST_F(Studio, SaveLoadRoundTripAndPresets) {
  L->setFieldText("train.steps", "7");
  L->setFieldText("parallel.head_chunks", "2");
  QString err;
  const QString saved = tmp.filePath("mine.json");
  ASSERT_TRUE(L->saveConfigFile(saved, &err)) << err.toStdString();
  L->setFieldText("train.steps", "9");
  ASSERT_TRUE(L->loadConfigFile(saved, &err)) << err.toStdString();
  EXPECT_EQ(L->fieldText("train.steps"), "7");
  EXPECT_EQ(L->fieldText("parallel.head_chunks"), "2");
  EXPECT_EQ(L->configName(), "tiny CPU demo");
  EXPECT_TRUE(L->isValid());
  // The saved file is a run config the engine reads.
  const auto cfg = ulysses::load_run_config(saved.toStdString());
  EXPECT_EQ(cfg.train.steps, 7);

  const auto presets = L->presetNames();
  EXPECT_TRUE(presets.contains("tiny"));
  EXPECT_TRUE(presets.contains("bench-1b"));
  ASSERT_TRUE(L->loadPreset("bench-1b", &err)) << err.toStdString();
  EXPECT_EQ(L->fieldText("model.hidden_size"), "2048");
  if (L->devices().gpus.isEmpty()) {  // bench-1b asks for CUDA
    EXPECT_FALSE(L->fieldError("train.device").isEmpty());
    EXPECT_FALSE(L->launchButton()->isEnabled());
  }
  EXPECT_FALSE(L->loadPreset("no-such-preset", &err));
  writeFile(tmp.filePath("broken.json"), "{\"model\": {\"hidden_size\": 64,}");
  EXPECT_FALSE(L->loadConfigFile(tmp.filePath("broken.json"), &err));
  EXPECT_TRUE(err.contains("not valid JSON")) << err.toStdString();
  writeFile(tmp.filePath("unknown.json"), "{\"train\": {\"stepz\": 3}}");
  EXPECT_FALSE(L->loadConfigFile(tmp.filePath("unknown.json"), &err));
  EXPECT_TRUE(err.contains("stepz")) << err.toStdString();
}

TEST_F(Studio, ImportsHuggingFaceConfig) {
  writeFile(tmp.filePath("hf/config.json"),
            R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_act":"silu","vocab_size":32000,
                "hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":16,"num_attention_heads":16,
                "num_key_value_heads":8,"rms_norm_eps":1e-05,"rope_theta":500000.0,"max_position_embeddings":131072,
                "tie_word_embeddings":false,"torch_dtype":"bfloat16"})");
  QString err;
  ASSERT_TRUE(L->importHfConfig(tmp.filePath("hf/config.json"), &err)) << err.toStdString();
  EXPECT_EQ(L->fieldText("model.hidden_size"), "2048");
  EXPECT_EQ(L->fieldText("model.num_key_value_heads"), "8");
  EXPECT_EQ(L->fieldText("model.rope_theta"), "500000.0");
  EXPECT_EQ(L->fieldText("train.steps"), "20");  // train section untouched
  writeFile(tmp.filePath("gelu.json"), R"({"hidden_act":"gelu","hidden_size":64,"num_attention_heads":4})");
  EXPECT_FALSE(L->importHfConfig(tmp.filePath("gelu.json"), &err));
  EXPECT_TRUE(err.contains("hidden_act")) << err.toStdString();
  // Opening a config.json through the window recognizes it as a Hugging Face config.
  L->setFieldText("model.hidden_size", "64");
  ASSERT_TRUE(w->openPath(tmp.filePath("hf/config.json"), &err)) << err.toStdString();
  EXPECT_EQ(L->fieldText("model.hidden_size"), "2048");
  // A run config naming its model_type inside the model section (qwen3-tiny.json, every
  // RUN/config.json) is a run config, not a Hugging Face one to refuse.
  ASSERT_TRUE(w->openPath(QStringLiteral(ULYSSES_SOURCE_DIR "/resources/configs/qwen3-tiny.json"), &err))
      << err.toStdString();
  EXPECT_EQ(L->configJson()["model"]["model_type"], "qwen3");
}

// A run folder whose config.json nests 100 000 deep opens (the config read as absent)
// instead of crashing the studio (SIGSEGV) when shown, and on every start while it sits in the
// runs folder. A monitor of 20 000 steps opens at once: points go in together (one at a time
// takes a minute for 10 000).
TEST_F(Studio, HostileRunFoldersOpen) {
  const QString run = tmp.filePath("runs/deep");
  writeFile(run + "/config.json", QByteArray(100000, '[') + QByteArray(100000, ']'));
  writeFile(run + "/run.json", R"({"status":"finished","world_size":2,"steps_done":20000})");
  QByteArray metrics;
  for (int i = 0; i < 20000; ++i)
    metrics += "{\"step\":" + QByteArray::number(i) +
               ",\"steps\":20000,\"loss\":" + QByteArray::number(5.0 - i * 1e-4) +
               ",\"tokens_per_s\":100,\"step_ms\":50,\"max_mem_bytes\":1000,\"elapsed_s\":0.1}\n";
  writeFile(run + "/metrics.jsonl", metrics);
  QString err;
  ASSERT_TRUE(w->openPath(run, &err)) << err.toStdString();
  EXPECT_EQ(w->monitor()->chartPoints(), 20000);
  w->runsPage()->refresh();
  EXPECT_GE(w->runsPage()->model()->rowOfDir(run), 0);
}

// A fixed tick count with "%d" and "%.3g" labels steps 0..1 "0 0 0 1 1" and a loss between
// 5.527 and 5.535 "5.53" five times. Every axis's labels of the monitor's charts must be
// distinct, at least two, and in order, whatever the data: few steps, a narrow band, a flat
// line, tiny values, large ones, a NaN among them.
TEST(MetricChartTicks, LabelsAreDistinctForAnyData) {
  const std::vector<std::vector<double>> cases = {
      {5.527344, 5.534590, 5.529},        // a narrow loss band
      {2.0},                              // one point (flat)
      {3.0, 3.0, 3.0},                    // flat line
      {0.0, 0.0},                         // flat at zero
      {1e-6, 3e-6, 2.5e-6},               // learning rates
      {1307.07, 1506.94, 4740.29},        // tokens/s
      {179253248, 180486144},             // bytes
      {-2.5, 7.25},                       // negative to positive
      {4.1, std::nan(""), 4.2, INFINITY}  // non-finite values are left out
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    ulysses::ui::MetricChart chart("loss", "loss");
    QList<QPointF> pts;
    for (size_t i = 0; i < cases[c].size(); ++i) pts.append(QPointF(double(i), cases[c][i]));
    chart.appendMany(pts);
    for (auto o : {Qt::Horizontal, Qt::Vertical}) {
      const QStringList labels = chart.tickLabels(o);
      SCOPED_TRACE("case " + std::to_string(c) + (o == Qt::Horizontal ? " steps: " : " values: ") +
                   labels.join(' ').toStdString());
      EXPECT_GE(labels.size(), 2);
      EXPECT_LE(labels.size(), 12);
      EXPECT_EQ(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());
      for (int i = 1; i < labels.size(); ++i) EXPECT_LT(labels[i - 1].toDouble(), labels[i].toDouble());
    }
  }
  // Non-finite points are not on the line.
  ulysses::ui::MetricChart chart("loss", "loss");
  chart.appendMany({QPointF(0, 1.0), QPointF(1, std::nan("")), QPointF(2, INFINITY), QPointF(3, 2.0)});
  EXPECT_EQ(chart.count(), 2);
  // 20 000 steps: all kept, at most ~kMaxDrawn drawn, the lowest and highest among them.
  ulysses::ui::MetricChart big("loss", "loss");
  QList<QPointF> many;
  for (int i = 0; i < 20000; ++i) many.append(QPointF(i, std::sin(i * 0.01) + (i == 12345 ? 5.0 : 0.0)));
  big.appendMany(many);
  big.append(20000, -3.0);
  EXPECT_EQ(big.count(), 20001);
  EXPECT_LE(big.drawnPoints(), ulysses::ui::MetricChart::kMaxDrawn + 2);
  const QList<QPointF> pts = big.points();
  EXPECT_EQ(pts.size(), 20001);
  EXPECT_EQ(pts[12345].y(), std::sin(123.45) + 5.0);
  // Steps are whole numbers, however few.
  ulysses::ui::MetricChart steps("loss", "loss");
  steps.appendMany({QPointF(0, 1.0), QPointF(1, 2.0)});
  EXPECT_EQ(steps.tickLabels(Qt::Horizontal), QStringList({"0", "1"}));
}

// A torn run.json (its writer cut off) beside a metrics.jsonl, and a status ulysses-run never
// writes, are an error banner saying the run's state is unknown: not a green "unknown after 2
// step(s), final loss ..." banner with ranks "running", nor the status shown raw.
TEST_F(Studio, UnreadableRunJsonIsNoGreenBanner) {
  const QString run = tmp.filePath("runs/torn");
  writeFile(run + "/config.json", R"({"parallel":{"sp_size":2,"dp_size":1},"train":{"steps":10}})");
  writeFile(run + "/metrics.jsonl",
            "{\"step\":0,\"steps\":10,\"loss\":6.0,\"tokens_per_s\":100,\"step_ms\":50,\"max_mem_bytes\":1000,"
            "\"elapsed_s\":0.1}\n");
  for (const QByteArray& record :
       {QByteArray(R"({"status":"finished","wor)"), QByteArray(R"({"status":"exploded","world_size":2})")}) {
    writeFile(run + "/run.json", record);
    QString err;
    ASSERT_TRUE(w->openPath(run, &err)) << err.toStdString();
    const QString banner = w->monitor()->bannerText();
    EXPECT_TRUE(banner.startsWith("The run's state is unknown")) << banner.toStdString();
    EXPECT_FALSE(banner.contains("exploded")) << banner.toStdString();
    EXPECT_TRUE(banner.contains("last loss 6.0000")) << banner.toStdString();
    EXPECT_EQ(w->monitor()->chartPoints(), 1);
  }
}

// A live run this window did not launch (started from a terminal, opened from the Runs list):
// the monitor follows its files as they grow (not frozen at the first read saying "running
// after 0 step(s), final loss ..."), says how it ended once run.json does, and the Runs page
// refuses to delete it under its ranks (ulysses-run would then report success into no folder).
TEST_F(Studio, ALiveRunFromDiskIsFollowedAndNeverDeleted) {
  const QString run = tmp.filePath("runs/live");
  auto metric = [](int step, double loss) {
    return QStringLiteral(
               "{\"step\":%1,\"steps\":10,\"loss\":%2,\"tokens_per_s\":100,\"step_ms\":50,\"max_mem_bytes\":1000,"
               "\"elapsed_s\":%3}\n")
        .arg(step)
        .arg(loss)
        .arg(0.1 * (step + 1))
        .toUtf8();
  };
  writeFile(run + "/config.json", R"({"parallel":{"sp_size":2,"dp_size":1},"train":{"steps":10}})");
  writeFile(run + "/metrics.jsonl", metric(0, 6.0) + metric(1, 5.5));
  const pid_t child = ::fork();  // a live process whose command line says ulysses-run
  if (child == 0) {
    ::execl("/bin/sleep", "ulysses-run", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    QFile cmd(QStringLiteral("/proc/%1/cmdline").arg(child));
    if (cmd.open(QIODevice::ReadOnly) && cmd.readAll().contains("ulysses-run")) break;
    QTest::qWait(10);
  }
  writeFile(run + "/run.json", R"({"status":"running","world_size":2,"steps_done":0,"duration_s":0.0,"pid":)" +
                                   QByteArray::number(child) + "}");
  QString err;
  ASSERT_TRUE(w->openPath(run, &err)) << err.toStdString();
  QString banner = w->monitor()->bannerText();
  EXPECT_TRUE(banner.startsWith("Running (started outside this window")) << banner.toStdString();
  EXPECT_TRUE(banner.contains("2 step(s) so far, loss 5.5")) << banner.toStdString();
  EXPECT_FALSE(banner.contains("final loss")) << banner.toStdString();
  EXPECT_EQ(w->monitor()->chartPoints(), 2);
  // Deleting it is refused while its ulysses-run lives.
  EXPECT_FALSE(w->runsPage()->deleteRun(run, &err));
  EXPECT_TRUE(err.contains("still running")) << err.toStdString();
  EXPECT_TRUE(QFileInfo::exists(run + "/metrics.jsonl"));
  // It goes on: the monitor reads the new step within a few seconds.
  {
    QFile f(run + "/metrics.jsonl");
    ASSERT_TRUE(f.open(QIODevice::Append));
    f.write(metric(2, 5.0));
  }
  for (int i = 0; i < 50 && w->monitor()->chartPoints() < 3; ++i) QTest::qWait(100);
  EXPECT_EQ(w->monitor()->chartPoints(), 3);
  // It ends: run.json says so, and the monitor with it.
  ::kill(child, SIGKILL);
  int st = 0;
  ::waitpid(child, &st, 0);
  writeFile(run + "/run.json",
            R"({"status":"finished","world_size":2,"steps_done":3,"duration_s":0.3,"final_loss":5.0,"exit_code":0})");
  for (int i = 0; i < 50 && !w->monitor()->bannerText().startsWith("finished"); ++i) QTest::qWait(100);
  banner = w->monitor()->bannerText();
  EXPECT_TRUE(banner.startsWith("finished after 3 step(s), final loss 5.0")) << banner.toStdString();
  EXPECT_TRUE(w->runsPage()->deleteRun(run, &err)) << err.toStdString();
}

TEST_F(Studio, EstimatesFollowTheForm) {
  ASSERT_TRUE(L->estimateModel()->hasEstimate());
  const auto before = L->estimateModel()->estimate();
  L->setFieldText("train.seq_length", "1024");
  ASSERT_TRUE(L->estimateModel()->hasEstimate());
  EXPECT_GT(L->estimateModel()->estimate().activation_bytes, before.activation_bytes);
  EXPECT_DOUBLE_EQ(L->estimateModel()->estimate().flops_per_step() > before.flops_per_step(), true);
  L->setFieldText("train.seq_length", "abc");
  EXPECT_FALSE(L->estimateModel()->hasEstimate());
}

// A failed run opened from disk: the banner names the rank and shows its last lines.
TEST_F(Studio, OpenFailedRunNamesRankAndLastLines) {
  const QString run = tmp.filePath("runs/tiny_20260101-000000");
  writeFile(run + "/config.json", R"({"parallel":{"sp_size":2,"dp_size":1},"train":{"steps":10}})");
  writeFile(run + "/run.json", R"({"status":"failed","world_size":2,"exit_code":1,"final_loss":5.5,"steps_done":2,
                                  "failed_rank":1,"message":"rank 1 exited with code 1","duration_s":3.0})");
  writeFile(run + "/metrics.jsonl",
            "{\"step\":0,\"steps\":10,\"loss\":6.0,\"tokens_per_s\":100,\"step_ms\":50,\"max_mem_bytes\":1000,"
            "\"elapsed_s\":0.1}\n"
            "{\"step\":1,\"steps\":10,\"loss\":5.5,\"tokens_per_s\":110,\"step_ms\":45,\"max_mem_bytes\":1100,"
            "\"elapsed_s\":0.2}\n");
  writeFile(run + "/logs/rank0.log", "step 0\nstep 1\n");
  writeFile(run + "/logs/rank1.log", "step 0\nstep 1\nRuntimeError: out of memory in attention\n");
  QString err;
  ASSERT_TRUE(w->openPath(run, &err)) << err.toStdString();
  const QString banner = w->monitor()->bannerText();
  EXPECT_TRUE(banner.contains("Rank 1 failed")) << banner.toStdString();
  EXPECT_TRUE(banner.contains("RuntimeError: out of memory in attention")) << banner.toStdString();
  EXPECT_EQ(w->monitor()->chartPoints(), 2);
  EXPECT_EQ(w->monitor()->progressValue(), 2);
  EXPECT_EQ(w->currentPage(), "monitor");
  EXPECT_TRUE(w->recentFiles().contains(QFileInfo(run).absoluteFilePath()));
  // Runs list shows it, compare works against a second run.
  w->runsPage()->refresh();
  EXPECT_GE(w->runsPage()->model()->rowOfDir(run), 0);
  const QString run2 = tmp.filePath("runs/tiny_20260101-000001");
  QDir().mkpath(run2);
  QFile::copy(run + "/config.json", run2 + "/config.json");
  writeFile(run2 + "/run.json", R"({"status":"finished","world_size":2,"final_loss":4.0,"steps_done":10})");
  ASSERT_TRUE(w->runsPage()->compare(run, run2));
  const auto* cm = w->runsPage()->compareModel();
  const int status = cm->rowOfField("status");
  ASSERT_GE(status, 0);
  EXPECT_EQ(cm->index(status, CompareModel::RunA).data().toString(), "failed");
  EXPECT_EQ(cm->index(status, CompareModel::RunB).data().toString(), "finished");
  // Delete refuses a folder that is not a run, removes a run.
  QDir().mkpath(tmp.filePath("runs/keep-me"));
  EXPECT_FALSE(w->runsPage()->deleteRun(tmp.filePath("runs/keep-me"), &err));
  EXPECT_TRUE(QFileInfo::exists(tmp.filePath("runs/keep-me")));
  EXPECT_TRUE(w->runsPage()->deleteRun(run2, &err)) << err.toStdString();
  EXPECT_FALSE(QFileInfo::exists(run2));
  EXPECT_EQ(w->runsPage()->model()->rowOfDir(run2), -1);
  EXPECT_FALSE(w->openPath(tmp.filePath("nothing-here"), &err));
}

// The launcher's contract seen from the studio, with a stand-in ulysses-run that fails on
// rank 1 the way the real one reports it (stderr "[rank r] ..." lines, run.json failed_rank).
// A run folder whose trace cannot be read still opens (metrics, banner), and the reason the
// trace did not open is shown in the status bar instead of being dropped.
TEST_F(Studio, UnreadableTraceOfRunIsReported) {
  const QString run = tmp.filePath("runs/broken-trace");
  writeFile(run + "/run.json", R"({"status":"finished","world_size":1,"exit_code":0,"final_loss":5.5,"steps_done":1})");
  writeFile(run + "/metrics.jsonl",
            "{\"step\":0,\"steps\":1,\"loss\":5.5,\"tokens_per_s\":100,\"step_ms\":50,\"max_mem_bytes\":1000,\"elapsed_"
            "s\":0.1}\n");
  writeFile(run + "/trace/rank0.sqlite", "this is not an SQLite database, only text of the right name\n");
  QSignalSpy failed(w->traceView(), &TraceView::loadFailed);
  QString err;
  ASSERT_TRUE(w->openPath(run, &err)) << err.toStdString();
  ASSERT_TRUE(failed.count() > 0 || failed.wait(20000)) << "the trace view never reported the unreadable trace";
  EXPECT_FALSE(w->lastTraceError().isEmpty());
  EXPECT_TRUE(w->statusBar()->currentMessage().startsWith("Trace not opened"))
      << w->statusBar()->currentMessage().toStdString();
  EXPECT_EQ(w->monitor()->chartPoints(), 1);  // the run itself opened
}

// Runs page "Resume": an interrupted run whose save_to holds a complete training-state
// checkpoint can be resumed (the launcher gets its config with train.resume_from); a finished
// run, or one whose only checkpoint is half-written, cannot, and the button says why.
// The runs page compares two traced runs per phase and per layer, loading both traces off
// the GUI thread (run_fixture.hpp: B's steps after the warm-up step take twice as long, so
// does layer 0's forward attention); a run without a trace gets no trace rows and says why.
TEST_F(Studio, RunsPageComparesTracesPerPhaseAndLayer) {
  const QString a = tmp.filePath("runs/fa"), b = tmp.filePath("runs/fb"), bare = tmp.filePath("runs/bare");
  ulysses::test::write_fixture_run(a.toStdString(), 2, {{10, 3.0, 1000}, {10, 2.9, 1000}, {10, 2.8, 1000}});
  ulysses::test::write_fixture_run(b.toStdString(), 2, {{10, 3.0, 1000}, {20, 2.9, 1000}, {20, 2.8, 1000}});
  auto* page = w->runsPage();
  QSignalSpy done(page, &RunsPage::traceCompareFinished);
  ASSERT_TRUE(page->compare(a, b));
  EXPECT_TRUE(page->compareTitle().contains("loading")) << page->compareTitle().toStdString();
  EXPECT_TRUE(page->traceCompareBusy());
  ASSERT_TRUE(done.wait(30000));
  EXPECT_TRUE(done.front().front().toBool());
  EXPECT_FALSE(page->traceCompareBusy());
  const auto* cm = page->compareModel();
  const int layer = cm->rowOfField("layer 0 attention fwd ms");
  ASSERT_GE(layer, 0);
  EXPECT_EQ(cm->index(layer, CompareModel::RunA).data().toString(), "4.000");
  EXPECT_EQ(cm->index(layer, CompareModel::Ratio).data().toString(), "2.000");
  EXPECT_TRUE(cm->index(layer, 0).data(CompareModel::DiffersRole).toBool());
  EXPECT_GE(cm->rowOfField("phase attention fwd ms"), 0);
  EXPECT_TRUE(page->compareTitle().contains("traces:")) << page->compareTitle().toStdString();

  QDir().mkpath(bare);
  QFile::copy(a + "/config.json", bare + "/config.json");
  QFile::copy(a + "/run.json", bare + "/run.json");
  ASSERT_TRUE(page->compare(a, bare));
  EXPECT_FALSE(page->traceCompareBusy());
  EXPECT_EQ(page->compareModel()->traceRows(), 0);
  EXPECT_TRUE(page->compareTitle().contains("bare has no trace")) << page->compareTitle().toStdString();
}

TEST_F(Studio, ResumeOffersOnlyInterruptedRunsWithACompleteCheckpoint) {
  const QString ckpt = tmp.filePath("ckpt");
  const QString half = tmp.filePath("ckpt-half");
  writeFile(ckpt + "/step-00000004/state.json", "{\"step\":4}");  // 10 bytes
  writeFile(ckpt + "/step-00000004/complete",
            R"({"format":"ulysses-train-state","version":1,"step":4,"files":{"state.json":10}})");
  writeFile(half + "/step-00000004/state.json", "{\"step\":4}");  // no `complete`: half-written
  QFile tiny(kTiny);
  ASSERT_TRUE(tiny.open(QIODevice::ReadOnly));
  auto cfg = nlohmann::json::parse(tiny.readAll().toStdString());
  auto makeRun = [&](const QString& name, const char* status, const QString& saveTo) {
    const QString run = tmp.filePath("runs/" + name);
    cfg["train"]["save_to"] = saveTo.toStdString();
    cfg["train"]["save_every"] = 2;
    cfg["data"]["path"] = QString(ULYSSES_SOURCE_DIR "/resources/data/tiny_corpus.txt").toStdString();
    writeFile(run + "/config.json", QByteArray::fromStdString(cfg.dump(2)));
    writeFile(run + "/run.json", QByteArray(R"({"world_size":2,"steps_done":5,"status":")") + status + "\"}");
    writeFile(run + "/metrics.jsonl",
              "{\"step\":0,\"steps\":20,\"loss\":6.0,\"tokens_per_s\":100,\"step_ms\":50,\"max_mem_bytes\":1000,"
              "\"elapsed_s\":0.1}\n");
    return run;
  };
  const QString stopped = makeRun("stopped", "stopped", ckpt);
  const QString finished = makeRun("finished", "finished", ckpt);
  const QString halfRun = makeRun("half", "failed", half);
  w->runsPage()->refresh();
  auto* button = w->runsPage()->findChild<QPushButton*>("resume");
  ASSERT_NE(button, nullptr);

  w->runsPage()->selectDir(finished);
  EXPECT_FALSE(button->isEnabled());
  EXPECT_TRUE(button->toolTip().contains("finished")) << button->toolTip().toStdString();
  w->runsPage()->selectDir(halfRun);
  EXPECT_FALSE(button->isEnabled());
  EXPECT_TRUE(button->toolTip().contains("no complete checkpoint")) << button->toolTip().toStdString();

  w->runsPage()->selectDir(stopped);
  ASSERT_TRUE(button->isEnabled()) << button->toolTip().toStdString();
  QTest::mouseClick(button, Qt::LeftButton);
  EXPECT_EQ(L->fieldText("train.resume_from"), ckpt);
  EXPECT_EQ(L->configJson()["train"]["resume_from"], ckpt.toStdString());
  EXPECT_EQ(w->currentPage(), "launch");
}

TEST_F(Studio, RankFailureMessageFromLauncher) {
  const QString fake = tmp.filePath("fake-ulysses-run");
  writeFile(fake, R"(#!/bin/sh
# args: CONFIG --json --out RUN
out="$4"; mkdir -p "$out"
echo '{"step":0,"steps":20,"loss":5.5,"lr":0.001,"grad_norm":1,"tokens":512,"tokens_per_s":1000,"step_ms":10,"max_mem_bytes":100,"elapsed_s":0.01}'
echo "[rank 0] step 0 done" >&2
echo "[rank 1] loading shard" >&2
echo "[rank 1] Error: all-to-all timed out after 120 s" >&2
echo "ulysses-run: rank 1 failed (exit code 1); stopping the other ranks" >&2
echo '{"status":"failed","world_size":2,"exit_code":1,"failed_rank":1,"message":"rank 1 exited with code 1","steps_done":1}' > "$out/run.json"
exit 1
)");
  QFile::setPermissions(fake, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  w->setLauncherProgram(fake);
  QSignalSpy done(w->controller(), &RunController::finished);
  QTest::mouseClick(L->launchButton(), Qt::LeftButton);
  ASSERT_TRUE(done.count() > 0 || done.wait(30000));
  const auto o = done.takeFirst().at(0).value<RunOutcome>();
  EXPECT_EQ(o.status, "failed");
  EXPECT_EQ(o.failedRank, 1);
  EXPECT_TRUE(o.message.contains("Rank 1 failed")) << o.message.toStdString();
  EXPECT_TRUE(o.message.contains("all-to-all timed out")) << o.message.toStdString();
  EXPECT_FALSE(o.message.contains("step 0 done")) << "other ranks' lines do not belong in the failure message";
  EXPECT_TRUE(w->monitor()->bannerText().contains("Rank 1 failed"));
  EXPECT_EQ(w->controller()->ranks()->state(1), RankStatusModel::State::Failed);
  EXPECT_EQ(w->monitor()->chartPoints(), 1);
  EXPECT_TRUE(L->launchButton()->isEnabled());  // ready for the next launch
  // A missing launcher is an error message, not a crash.
  w->setLauncherProgram(tmp.filePath("missing/ulysses-run"));
  QString err;
  EXPECT_FALSE(w->launch(&err));
  EXPECT_TRUE(err.contains("ulysses-run was not found")) << err.toStdString();
}

TEST(StudioCli, ScreenshotAndBadArguments) {
#ifndef ULYSSES_STUDIO_PATH
  GTEST_SKIP() << "ulysses-studio is not built";
#else
  QTemporaryDir tmp;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("QT_QPA_PLATFORM", "offscreen");
  env.insert("XDG_CONFIG_HOME", tmp.filePath("config"));
  auto runStudio = [&](const QStringList& args, QString* out) {
    QProcess p;
    p.setProcessEnvironment(env);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(ULYSSES_STUDIO_PATH, args);
    if (!p.waitForFinished(90000)) {
      p.kill();
      p.waitForFinished();
      return -100;
    }
    *out = QString::fromLocal8Bit(p.readAll());
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  };
  QString out;
  {  // a display that cannot be opened: Qt's qFatal aborted (134) and said to reinstall
    const auto saved = env;
    env.insert("QT_QPA_PLATFORM", "no-such-platform");
    EXPECT_EQ(runStudio({kTiny}, &out), 1) << out.toStdString();
    EXPECT_TRUE(out.contains("ulysses-studio: cannot open the display")) << out.toStdString();
    env = saved;
  }
  const QString png = tmp.filePath("shot.png");
  ASSERT_EQ(runStudio({kTiny, "--screenshot", png, "--runs-dir", tmp.filePath("runs"), "--size", "1200x800"}, &out), 0)
      << out.toStdString();
  QImage img(png);
  ASSERT_FALSE(img.isNull());
  EXPECT_GE(img.width(), 1000);
  // A screenshot leaves the user's settings as they were (saving the config it draws as
  // lastConfig would make the next start open it), yet reads them.
  {
    const QString conf = tmp.filePath("config/Ulysses/Ulysses Studio.conf");
    ASSERT_TRUE(QDir().mkpath(QFileInfo(conf).absolutePath()));
    const QByteArray mine = "[General]\nlastConfig=/my/own.json\nrecentFiles=/my/own.json\n";
    {
      QFile f(conf);
      ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
      f.write(mine);
    }
    ASSERT_EQ(runStudio({kTiny, "--screenshot", png, "--runs-dir", tmp.filePath("runs")}, &out), 0)
        << out.toStdString();
    QFile f(conf);
    ASSERT_TRUE(f.open(QIODevice::ReadOnly));
    EXPECT_EQ(f.readAll(), mine);
  }
  EXPECT_EQ(runStudio({"--view", "nonsense", "--screenshot", png}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("unknown --view")) << out.toStdString();
  EXPECT_EQ(runStudio({tmp.filePath("does-not-exist"), "--screenshot", png}, &out), 2) << out.toStdString();
  EXPECT_EQ(runStudio({"--bogus-option"}, &out), 2) << out.toStdString();
  // A run folder whose trace cannot be read, asked for its timeline: exit 1 with the reason,
  // and no picture of the error page in place of the timeline.
  const QString broken = tmp.filePath("broken run");
  ASSERT_TRUE(QDir().mkpath(broken + "/trace"));
  ASSERT_TRUE(QFile::copy(kTiny, broken + "/config.json"));
  {
    QFile junk(broken + "/trace/rank0.sqlite");
    ASSERT_TRUE(junk.open(QIODevice::WriteOnly));
    junk.write(QByteArray(8192, 'x'));
  }
  const QString png2 = tmp.filePath("broken.png");
  EXPECT_EQ(runStudio({broken, "--view", "timeline", "--screenshot", png2}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("rank0.sqlite")) << out.toStdString();
  EXPECT_FALSE(QFileInfo::exists(png2));
  // The same with rank0.sqlite missing (trace/ holds only rank1): exit 2, not the error page and exit 0.
  ASSERT_TRUE(QFile::rename(broken + "/trace/rank0.sqlite", broken + "/trace/rank1.sqlite"));
  EXPECT_EQ(runStudio({broken, "--view", "timeline", "--screenshot", png2}, &out), 2) << out.toStdString();
  EXPECT_FALSE(QFileInfo::exists(png2));
  // No trace/ folder at all (an untraced run), or a file in its place: the same (both drew an
  // empty trace page, exit 0); the monitor of that run still opens.
  ASSERT_TRUE(QDir(broken + "/trace").removeRecursively());
  EXPECT_EQ(runStudio({broken, "--view", "timeline", "--screenshot", png2}, &out), 2) << out.toStdString();
  EXPECT_FALSE(QFileInfo::exists(png2));
  {
    QFile f(broken + "/trace");
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("not a folder");
  }
  EXPECT_EQ(runStudio({broken, "--view", "Report", "--screenshot", png2}, &out), 2) << out.toStdString();
  EXPECT_FALSE(QFileInfo::exists(png2));
  EXPECT_EQ(runStudio({broken, "--view", "monitor", "--screenshot", png2}, &out), 0) << out.toStdString();
  EXPECT_TRUE(QFileInfo::exists(png2));
  // A size smaller than the page can be drawn at is said, with the size the picture has.
  EXPECT_EQ(runStudio({broken, "--view", "monitor", "--size", "200x200", "--screenshot", png2}, &out), 0)
      << out.toStdString();
  EXPECT_TRUE(out.contains("not the 200x200 asked for (this view cannot be drawn smaller)")) << out.toStdString();
  EXPECT_TRUE(
      out.contains(QStringLiteral("the screenshot is %1x%2").arg(QImage(png2).width()).arg(QImage(png2).height())))
      << out.toStdString();
  QFile::remove(png2);
  // A target that is no regular file (a FIFO; a link to a device) is refused before drawing:
  // the save would rename a PNG over it (/dev/full would become a PNG).
  const QString fifo = tmp.filePath("fifo.png");
  ASSERT_EQ(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
  EXPECT_EQ(runStudio({"--screenshot", fifo}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("is not a regular file")) << out.toStdString();
  EXPECT_FALSE(QFileInfo(fifo).isFile());
  const QString link = tmp.filePath("null.png");
  ASSERT_TRUE(QFile::link("/dev/null", link));
  EXPECT_EQ(runStudio({"--screenshot", link}, &out), 2) << out.toStdString();
  EXPECT_TRUE(QFileInfo(QStringLiteral("/dev/null")).exists() && !QFileInfo(QStringLiteral("/dev/null")).isFile());
  // A suffix no image writer has is refused before anything is drawn, and the file of that
  // name is left as it was (not emptied); sizes past 16384 a side are refused.
  const QString notes = tmp.filePath("notes.txt");
  {
    QFile n(notes);
    ASSERT_TRUE(n.open(QIODevice::WriteOnly));
    n.write("keep me");
  }
  EXPECT_EQ(runStudio({"--screenshot", notes}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("cannot write .txt")) << out.toStdString();
  {
    QFile n(notes);
    ASSERT_TRUE(n.open(QIODevice::ReadOnly));
    EXPECT_EQ(n.readAll(), QByteArray("keep me"));
  }
  EXPECT_EQ(runStudio({"--size", "20000x20000", "--screenshot", png}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("16384")) << out.toStdString();
  // --runs-dir must be a folder; --dark and --runs-dir are for this session only (a scripted
  // screenshot left the user's studio dark, remembering a scratch runs folder).
  EXPECT_EQ(runStudio({"--screenshot", tmp.filePath("no/such/folder/x.png")}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("does not exist")) << out.toStdString();
  EXPECT_EQ(runStudio({"--runs-dir", notes, "--screenshot", png}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("is not a folder")) << out.toStdString();
  ASSERT_EQ(runStudio({"--dark", "--runs-dir", tmp.filePath("elsewhere"), "--screenshot", png}, &out), 0)
      << out.toStdString();
  QSettings conf(tmp.filePath("config/Ulysses/Ulysses Studio.conf"), QSettings::IniFormat);
  EXPECT_FALSE(conf.value(QStringLiteral("darkTheme"), false).toBool());
  EXPECT_NE(conf.value(QStringLiteral("runsDir")).toString(), tmp.filePath("elsewhere"));
  // Never through a link to a regular file, nor over a file that is not an image (a link named
  // shot.png to someone's config.json, or to the rank file being drawn, would become a PNG); an
  // earlier screenshot is replaced as before.
  const QString victim = tmp.filePath("victim.json");
  {
    QFile v(victim);
    ASSERT_TRUE(v.open(QIODevice::WriteOnly));
    v.write("{\"my\": \"config\"}");
  }
  const QString link2 = tmp.filePath("link.png");
  ASSERT_TRUE(QFile::link(victim, link2));
  EXPECT_EQ(runStudio({"--screenshot", link2}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("is a symbolic link")) << out.toStdString();
  const QString fakePng = tmp.filePath("notes.png");
  {
    QFile f(fakePng);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("my notes, not an image");
  }
  EXPECT_EQ(runStudio({"--screenshot", fakePng}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("is not an image")) << out.toStdString();
  for (const QString& f : {victim, fakePng}) {
    QFile r(f);
    ASSERT_TRUE(r.open(QIODevice::ReadOnly));
    EXPECT_FALSE(r.readAll().startsWith("\x89PNG")) << f.toStdString();
  }
  EXPECT_EQ(runStudio({"--screenshot", png}, &out), 0) << out.toStdString();  // png holds an earlier shot
  // A stray file named for a rank past 2^31-1 beside a run's trace: the monitor still opens (not
  // exit 1 for every view), the trace views refuse with exit 2.
  const QString stray = tmp.filePath("stray run");
  ASSERT_TRUE(QDir().mkpath(stray + "/trace"));
  ASSERT_TRUE(QFile::copy(kTiny, stray + "/config.json"));
  {
    QFile r(stray + "/run.json");
    ASSERT_TRUE(r.open(QIODevice::WriteOnly));
    // A message of 100 000 characters without a space: the banner must not widen the window to
    // a million pixels past --size and fail the screenshot.
    r.write("{\"status\":\"failed\",\"world_size\":2,\"steps_done\":1,\"final_loss\":-1e308,\"message\":\"" +
            QByteArray(100000, 'M') + "\"}");
    QFile z(stray + "/trace/rank99999999999.sqlite");
    ASSERT_TRUE(z.open(QIODevice::WriteOnly));
    z.write("x");
  }
  const QString shot3 = tmp.filePath("stray.png");
  ASSERT_EQ(runStudio({stray, "--view", "monitor", "--screenshot", shot3, "--size", "1200x800"}, &out), 0)
      << out.toStdString();
  QImage img3(shot3);
  ASSERT_FALSE(img3.isNull());
  EXPECT_LE(img3.width(), 1300) << "the banner widened the window";
  EXPECT_EQ(runStudio({stray, "--view", "timeline", "--screenshot", shot3}, &out), 2) << out.toStdString();
  EXPECT_TRUE(out.contains("past the largest rank")) << out.toStdString();
#endif
}

// ---- real launches (ulysses-run built) ---------------------------------------------------

double referenceFinalLoss(const QString& exe, const QString& config, const QString& out, QString* log) {
  QProcess p;
  p.start(exe, {config, "--json", "--out", out});
  if (!p.waitForFinished(300000)) {
    p.kill();
    p.waitForFinished();
    *log = "ulysses-run did not finish in 300 s";
    return std::nan("");
  }
  *log = QString::fromLocal8Bit(p.readAllStandardError()).right(2000);
  double loss = std::nan("");
  for (const auto& line : p.readAllStandardOutput().split('\n')) {
    MetricPoint m;
    if (parseMetricLine(line, &m)) loss = m.loss;
  }
  return loss;
}

// The launcher's output folder is the runs folder (both ways), and the Ready line says the
// whole layout and where the run lands.
TEST_F(Studio, ReadyLineNamesTheLayoutAndTheOutputFolder) {
  auto* out = L->findChild<QLineEdit*>("outputFolder");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(L->outputFolder(), QFileInfo(tmp.filePath("runs")).absoluteFilePath());
  ASSERT_TRUE(L->setFieldText("parallel.dp_size", "2"));
  EXPECT_TRUE(L->statusText().startsWith("Ready: 4 rank(s) = sp 2 x ring 1 x dp 2,")) << L->statusText().toStdString();
  EXPECT_TRUE(L->statusText().contains(QDir(L->outputFolder()).filePath(slug(L->configName()) + "_<date-time>")))
      << L->statusText().toStdString();
  const QString elsewhere = tmp.filePath("elsewhere");
  out->setFocus();
  out->selectAll();
  QTest::keyClicks(out, elsewhere);
  QTest::keyClick(out, Qt::Key_Return);  // editingFinished: the runs folder follows
  EXPECT_EQ(w->runsDir(), elsewhere);
  EXPECT_TRUE(L->statusText().contains(elsewhere)) << L->statusText().toStdString();
  w->setRunsDir(tmp.filePath("runs"));  // and the other way
  EXPECT_EQ(L->outputFolder(), QFileInfo(tmp.filePath("runs")).absoluteFilePath());
}

TEST_F(Studio, LaunchTinyRunAndFindItInRunsList) {
  SKIP_WITHOUT_ULYSSES_RUN();
  w->setLauncherProgram(runExe);
  ASSERT_TRUE(L->setFieldText("train.steps", "3"));
  ASSERT_TRUE(L->isValid()) << L->generalIssues().toStdString();
  QSignalSpy metrics(w->controller(), &RunController::metric);
  QSignalSpy done(w->controller(), &RunController::finished);
  QTest::mouseClick(L->launchButton(), Qt::LeftButton);
  ASSERT_TRUE(w->controller()->isRunning() || done.count() > 0);
  EXPECT_FALSE(L->launchButton()->isEnabled());  // one run at a time
  ASSERT_TRUE(done.count() > 0 || done.wait(300000)) << "run did not finish in 300 s";
  const auto o = done.takeFirst().at(0).value<RunOutcome>();
  ASSERT_EQ(o.status, "finished") << o.message.toStdString();
  EXPECT_EQ(metrics.count(), 3);
  EXPECT_EQ(w->monitor()->progressValue(), 3);
  EXPECT_EQ(w->monitor()->chartPoints(), 3);
  EXPECT_TRUE(o.runDir.startsWith(L->outputFolder())) << o.runDir.toStdString();
  // Each rank's step time, live from ulysses-run --json's liveness lines (steps 0 and 1 at least).
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(w->controller()->ranks()->stepMs(r), 0.0) << "rank " << r;
    EXPECT_GE(w->controller()->ranks()->timedStep(r), 1) << "rank " << r;
  }

  // Reference: ulysses-run directly on the same config (same seed -> same loss).
  QString err, log;
  const QString refConfig = tmp.filePath("ref.json");
  ASSERT_TRUE(L->saveConfigFile(refConfig, &err)) << err.toStdString();
  const double ref = referenceFinalLoss(runExe, refConfig, tmp.filePath("ref-run"), &log);
  ASSERT_FALSE(std::isnan(ref)) << log.toStdString();

  auto* model = w->runsPage()->model();
  const int row = model->rowOfDir(o.runDir);
  ASSERT_GE(row, 0) << "finished run not in the runs list";
  const auto& s = model->run(row);
  EXPECT_EQ(s.status, "finished");
  ASSERT_TRUE(s.hasFinalLoss);
  EXPECT_NEAR(s.finalLoss, ref, 1e-6 * std::max(1.0, std::abs(ref)));
  EXPECT_EQ(model->index(row, RunsModel::FinalLoss).data().toString(), QString::number(ref, 'f', 4));
  EXPECT_EQ(s.stepsDone, 3);
  // Estimates now show what was measured.
  EXPECT_FALSE(L->estimateModel()->index(EstimateModel::StepTime, EstimateModel::Measured).data().toString().isEmpty());
}

// Children of `pid` (from /proc/*/stat).
QVector<qint64> childPids(qint64 pid) {
  QVector<qint64> out;
  for (const auto& e : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool ok = false;
    const qint64 p = e.toLongLong(&ok);
    if (!ok) continue;
    QFile f("/proc/" + e + "/stat");
    if (!f.open(QIODevice::ReadOnly)) continue;
    const QByteArray st = f.readAll();
    const int close = st.lastIndexOf(')');
    const auto fields = st.mid(close + 2).split(' ');  // state ppid ...
    if (fields.size() > 1 && fields[1].toLongLong() == pid) out << p;
  }
  return out;
}

bool alive(qint64 pid) {
  QFile f(QStringLiteral("/proc/%1/stat").arg(pid));
  if (!f.open(QIODevice::ReadOnly)) return false;
  const QByteArray st = f.readAll();
  const int close = st.lastIndexOf(')');
  return close > 0 && st.size() > close + 2 && st[close + 2] != 'Z';  // a zombie is not running
}

TEST_F(Studio, StopFourRankRunLeavesNoWorkerAndReadableTrace) {
  SKIP_WITHOUT_ULYSSES_RUN();
  w->setLauncherProgram(runExe);
  ASSERT_TRUE(L->setFieldText("parallel.sp_size", "4"));
  ASSERT_TRUE(L->setFieldText("train.steps", "100000"));
  ASSERT_TRUE(L->setFieldText("profile.enabled", "true"));
  ASSERT_TRUE(L->isValid()) << L->generalIssues().toStdString();
  QSignalSpy metrics(w->controller(), &RunController::metric);
  QSignalSpy done(w->controller(), &RunController::finished);
  QTest::mouseClick(L->launchButton(), Qt::LeftButton);
  ASSERT_TRUE(w->controller()->isRunning());
  ASSERT_TRUE(metrics.count() > 0 || metrics.wait(180000)) << "no step finished in 180 s";
  const qint64 launcherPid = w->controller()->pid();
  const auto workers = childPids(launcherPid);
  EXPECT_EQ(workers.size(), 4) << "expected one worker process per rank under ulysses-run";
  EXPECT_EQ(w->controller()->ranks()->rowCount(), 4);

  QTest::mouseClick(w->monitor()->stopButton(), Qt::LeftButton);
  ASSERT_TRUE(done.count() > 0 || done.wait(60000)) << "Stop did not end the run in 60 s";
  const auto o = done.takeFirst().at(0).value<RunOutcome>();
  EXPECT_EQ(o.status, "stopped") << o.message.toStdString();
  EXPECT_EQ(w->monitor()->bannerTone(), 1) << "a stopped run's banner is amber, not the finished run's green";
  EXPECT_FALSE(alive(launcherPid));
  for (qint64 p : workers) EXPECT_FALSE(alive(p)) << "worker " << p << " still running after Stop";

  const QByteArray trace = QDir(o.runDir).filePath("trace/rank0.sqlite").toLocal8Bit();
  ASSERT_TRUE(QFileInfo::exists(trace)) << trace.constData();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(trace.constData(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
  sqlite3_finalize(st);
  sqlite3_close(db);
  // The stopped run is listed as stopped.
  const int row = w->runsPage()->model()->rowOfDir(o.runDir);
  ASSERT_GE(row, 0);
  EXPECT_EQ(w->runsPage()->model()->run(row).status, "stopped");
  // Opened again from disk: amber too.
  QString err;
  ASSERT_TRUE(w->openPath(o.runDir, &err)) << err.toStdString();
  EXPECT_EQ(w->monitor()->bannerTone(), 1) << w->monitor()->bannerText().toStdString();
}

}  // namespace
