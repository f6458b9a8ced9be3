# Warning flags as an INTERFACE target, linked PRIVATE by every project target.
add_library(ulysses_warnings INTERFACE)
add_library(ulysses::warnings ALIAS ulysses_warnings)
target_compile_options(ulysses_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
