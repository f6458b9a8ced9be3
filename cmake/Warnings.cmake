# Warning flags as an INTERFACE target, linked PRIVATE by every project target.
add_library(ulysses_warnings INTERFACE)
add_library(ulysses::warnings ALIAS ulysses_warnings)
target_compile_options(ulysses_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
# CI builds with -DULYSSES_WERROR=ON (.ci/run): a warning in the project's own code fails the
# build. Third-party headers (libtorch, Qt) are system includes, so their warnings do not count.
option(ULYSSES_WERROR "Treat warnings in the project's own code as errors" OFF)
# GCC 12's -Wmaybe-uninitialized fires inside libstdc++ (std::regex, std::function) under
# optimisation and sanitizers; it stays a warning.
if(ULYSSES_WERROR)
  target_compile_options(ulysses_warnings INTERFACE -Werror -Wno-error=maybe-uninitialized)
endif()
