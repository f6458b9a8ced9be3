// The launcher form's checks, by the engine's rules (see launch_form.hpp).
#include "launch_form.hpp"

#include <algorithm>

#include "checkpoint_layout.hpp"
#include "device_decision.hpp"
#include "form_fields.hpp"

namespace ulysses::ui {

int LaunchFormCheck::problems() const {
  int n = static_cast<int>(general.size());
  for (const auto& l : field_errors) n += static_cast<int>(l.size());
  return n;
}

LaunchFormCheck checkLaunchForm(const json& base, const QString& name,
                                const std::function<QString(const QString&)>& fieldText, const DeviceScan& devices) {
  LaunchFormCheck out;
  json j = base.is_object() ? base : json::object();
  j["name"] = name.trimmed().toStdString();
  QHash<QString, bool> inForm;
  for (const auto& spec : configFields()) {
    const QString dotted = spec.dotted();
    inForm.insert(dotted, true);
    const std::string sec = spec.section.toStdString(), key = spec.key.toStdString();
    const json v = field_value_from_text(*spec.field, fieldText(dotted).toStdString());
    try {  // the parser's type rules, one field at a time so the message sits on its field
      json probe;
      probe[sec][key] = v;
      RunConfig::from_json(probe);
    } catch (const std::exception& e) {
      out.field_errors[dotted] << QString::fromStdString(e.what());
      continue;
    }
    j[sec][key] = v;
  }
  out.config_json = j;
  if (!out.field_errors.isEmpty()) return out;
  try {
    const RunConfig cfg = RunConfig::from_json(j);
    auto issues = validate_with_files(cfg, FileChecks::Quick);
    // With train.init_from, the model keys must agree with the checkpoint's config.json, as
    // ulysses-run reads the config (the form read "Ready" for a different rms_norm_eps).
    if (!cfg.train.init_from.empty()) {
      try {
        run_config_from_json(j);
      } catch (const ConfigError& e) {
        const std::string m = e.what();
        // "model.KEY = ... differs from ...": on that field; anything else on train.init_from.
        std::string field = "train.init_from";
        if (m.rfind("model.", 0) == 0 && m.find(' ') != std::string::npos) field = m.substr(0, m.find(' '));
        const bool said = std::any_of(issues.begin(), issues.end(),
                                      [&](const ConfigIssue& i) { return i.field == "train.init_from"; });
        if (field != "train.init_from" || !said) issues.push_back({field, m});
      }
    }
    // train.save_to as ulysses-run refuses it before launch (the studio never passes --force),
    // so the form does not read "Ready" for a launch that will be refused.
    for (auto& i : ckpt::save_to_issues(cfg, /*force=*/false)) issues.push_back(std::move(i));
    // Devices as ulysses-run decides them, with the GPUs this machine's scan found.
    DeviceFacts facts;
    // GPUs in the scan count as usable (the planner plans for them, as before); without any,
    // this build's own answer. ulysses-run repeats the decision against the worker's build.
    facts.build_has_cuda = build_has_cuda() || !devices.gpus.isEmpty();
    facts.visible_gpus = static_cast<int>(devices.gpus.size());
    facts.local_world_size = static_cast<int>(std::clamp<int64_t>(cfg.parallel.world_size(), 1, 1 << 20));
    facts.gpu_source = std::to_string(devices.gpus.size()) + " GPU(s) in the studio's device scan" +
                       (devices.note.isEmpty() ? std::string() : ": " + devices.note.toStdString());
    decide_device(cfg, facts, &issues);
    for (const auto& i : issues) {
      const QString f = QString::fromStdString(i.field), msg = QString::fromStdString(i.message);
      if (inForm.contains(f))
        out.field_errors[f] << msg;
      else
        out.general << msg;
    }
    if (issues.empty()) out.config = cfg;
  } catch (const std::exception& e) {
    out.general << QString::fromStdString(e.what());
  }
  return out;
}

}  // namespace ulysses::ui
