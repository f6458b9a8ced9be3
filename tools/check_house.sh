#!/usr/bin/env bash
# The house's "one place" rules, checked over the product's code (common/, engine/, profiler/, ui/,
# app/): the run folder's file names are spelled only in run_layout.hpp, run.json is read and written
# only by common/src/run_record.cpp, Hugging Face file names only as their constants, and files are
# written whole only through the one atomic writer (common/src/atomic_file.cpp); the
# memory planner's step is the Trainer's; no tracked file keeps merge-conflict markers; no
# include climbs out of its folder with ../.
# Prints each offending line; exit 1 when there is one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bad=0
# A run folder's records as string literals anywhere but the layout header.
if hits=$(grep -rnE '["/](run\.json|metrics\.jsonl)"' common engine profiler ui app --include='*.cpp' --include='*.hpp' \
            | grep -v '^common/include/ulysses/common/run_layout.hpp:'); then
  echo "run folder file names spelled outside common/include/ulysses/common/run_layout.hpp:"
  echo "$hits"
  bad=1
fi
# A Hugging Face folder's file names (model.safetensors, its index, config.json) only as their
# constants (engine/config/checkpoint_layout.hpp; a run folder's own config.json is run_layout.hpp's).
if hits=$(grep -rnE '"(model\.safetensors|model\.safetensors\.index\.json|config\.json)"' common engine profiler ui app \
            --include='*.cpp' --include='*.hpp' \
            | grep -vE '^(engine/config/checkpoint_layout\.hpp|common/include/ulysses/common/run_layout\.hpp):' \
            | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'); then
  echo "Hugging Face file names spelled outside their constants (ckpt::kWeightsFile, kWeightsIndexFile, kModelConfigFile):"
  echo "$hits"
  bad=1
fi
# One run.json reader and writer (common/src/run_record.cpp): a second one names run.json's keys
# (RunRecordFile::has("key") asks the one reader what it read).
if hits=$(grep -rnE '"(started_at|ended_at|steps_done|failed_rank|final_loss)"' common engine profiler ui app \
            --include='*.cpp' --include='*.hpp' | grep -v '^common/src/run_record\.cpp:' \
            | grep -vE '\.has\("[a-z_]+"\)'); then
  echo "run.json read or written outside common/src/run_record.cpp (use ulysses::read_run_record_file / write_run_record_file):"
  echo "$hits"
  bad=1
fi
# rename(2) of a written file: only the atomic writer. Folders renamed whole (a checkpoint's
# staging folder, a claimed run folder, a prepared dataset folder) and a corrupt rendezvous store
# moved aside (rendezvous_store.cpp) are the listed exceptions.
allowed='^(common/src/atomic_file\.cpp|engine/core/checkpoint\.cpp|engine/core/train_state\.cpp|engine/launch/run_launcher\.cpp|engine/data/dataset_prepare\.cpp|engine/core/rendezvous_store\.cpp):'
if hits=$(grep -rnE '(std::|::|fs::)rename\(' common engine profiler ui app --include='*.cpp' --include='*.hpp' \
            | grep -vE "$allowed"); then
  echo "files renamed into place outside the one atomic writer (use ulysses::write_file_atomically):"
  echo "$hits"
  bad=1
fi
# The memory planner builds no optimizer, gradient buffer or parameter buffer of its own: it
# runs a Trainer (issue 38), whose construction and step are the only ones.
if hits=$(grep -nE 'ShardedAdamW|make_adamw|optim::AdamW|torch::zeros|bind_flat_grads|move_params_into' \
            engine/core/meta_dry_run.cpp); then
  echo "the memory planner constructs training state of its own (build a Trainer instead):"
  echo "$hits"
  bad=1
fi
# Merge-conflict markers left in any tracked text file (a merge committed half-resolved).
if hits=$(git grep -nIE '^(<<<<<<< |>>>>>>> )' -- . 2>/dev/null); then
  echo "merge-conflict markers left in tracked files:"
  echo "$hits"
  bad=1
fi
# One include style (docs/CODING.md): a project header is named from its library's include
# root, never by climbing out of the including file's folder.
if hits=$(git grep -nE '^#include "\.\./' -- '*.cpp' '*.hpp' '*.h' 2>/dev/null); then
  echo "includes that climb with ../ (name the header from its include root):"
  echo "$hits"
  bad=1
fi
if [ "$bad" -eq 0 ]; then
  echo "house rules hold: one run layout, one run.json reader, HF file names in their constants, one atomic writer," \
       "one training step, no conflict markers, one include style"
fi
exit "$bad"
