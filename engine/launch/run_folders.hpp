// ulysses-run's folders taken for a run: the admission rules (admission.hpp) applied, then
// train.save_to claimed, then --out claimed and looked at again (no other launcher can change
// it then), an old --out moved aside under --force and the fresh folder claimed. The claims
// are held until the caller's RunFolders goes (the end of the program).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "admission.hpp"
#include "folder_claim.hpp"

namespace ulysses::launch {

struct RunFolders {
  FolderClaim save_to, out;
};

// Nothing when both folders are taken; the refusal otherwise (nothing of the user's moved or
// written then, beyond an empty --out or save folder made by its claim). `note` hears what was
// done on the user's behalf ("--force: moved the old X aside to Y").
std::optional<Refusal> take_run_folders(const AdmissionRequest& req, const RunConfig& cfg, const OwnerRecord& me,
                                        RunFolders& folders, const std::function<void(const std::string&)>& note);

}  // namespace ulysses::launch
