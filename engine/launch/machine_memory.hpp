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

namespace ulysses::launch {

// available_memory_bytes for this machine now (/proc/meminfo, the cgroup's memory files).
int64_t machine_memory_bytes();

// Cores this process may run on (its affinity mask: taskset, a container's cpuset), at least 1.
int64_t usable_cores();

}  // namespace ulysses::launch
