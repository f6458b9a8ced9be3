// Widget-free model of the launcher form's checks: the texts of the form's fields (plus the
// config they were laid over, the run name and the device scan) in; the config JSON, the
// RunConfig when it can launch, and the messages per field and general out. Every message
// is the engine's own (engine/config): the parser's type errors per field
// (RunConfig::from_json), validate_with_files(FileChecks::Quick) and decide_device with this
// machine's GPUs as facts, the checks ulysses-run makes before it starts a rank. Nothing is
// reworded here; LauncherPage only displays the result.
#pragma once

#include <QHash>
#include <QString>
#include <QStringList>
#include <functional>
#include <optional>

#include "device_info.hpp"
#include "run_config.hpp"

namespace ulysses::ui {

struct LaunchFormCheck {
  json config_json;                          // the form as a run config, "name" included
  std::optional<RunConfig> config;           // set when there is no problem at all
  QHash<QString, QStringList> field_errors;  // dotted key of a form field -> messages
  QStringList general;                       // messages about keys the form has no field for
  int problems() const;
};

// `base`: the config the form was filled from (every key; keys without a form field keep
// its values); `fieldText(dotted)`: the text of a form field ("true"/"false" for check boxes).
LaunchFormCheck checkLaunchForm(const json& base, const QString& name,
                                const std::function<QString(const QString&)>& fieldText, const DeviceScan& devices);

}  // namespace ulysses::ui
