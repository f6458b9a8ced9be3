// Memory a run may count on before launch (ulysses-run's memory check, docs/RELIABILITY.md).
// Torch-free and pure: the callers read the files, the tests hand in text.
#pragma once

#include <cstdint>
#include <string>

namespace ulysses::launch {

// Bytes the machine can give a new run now: /proc/meminfo's MemAvailable (what the kernel can
// hand out without swapping: free memory plus reclaimable caches), or, under a cgroup v2 memory
// limit, what is left of it if less (memory.max - memory.current + the reclaimable
// inactive_file of memory.stat). `physical` when meminfo has no MemAvailable (kernels before
// 3.14); 0 when nothing is known. Malformed text counts as absent.
int64_t available_memory_bytes(const std::string& meminfo, const std::string& cgroup_max,
                               const std::string& cgroup_current, const std::string& cgroup_stat, int64_t physical);

}  // namespace ulysses::launch
