# The libFuzzer targets, defined once for both builds that make them:
#   - fuzz/CMakeLists.txt, the project of its own that fuzz/run_fuzz.sh builds for long runs;
#   - the ci-asan preset (ULYSSES_FUZZ=ON, clang), where they link the same ASan+UBSan
#     libraries the sanitizer tests use, so CI compiles the torch-free sources once for both.
# ulysses_fuzz_targets(CONFIG_LIB LAUNCH_LIB PROFILER_LIB) adds fuzz_<name> for each name of
# ULYSSES_FUZZ_TARGET_NAMES; the caller compiles the libraries with -fsanitize=fuzzer-no-link.
set(ULYSSES_FUZZ_TARGET_NAMES safetensors_header config metric_line run_record trace_loader trace_caches)
set(ULYSSES_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
function(ulysses_fuzz_targets config_lib launch_lib profiler_lib)
  foreach(t ${ULYSSES_FUZZ_TARGET_NAMES})
    add_executable(fuzz_${t} ${ULYSSES_FUZZ_DIR}/fuzz_${t}.cpp)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  endforeach()
  target_link_libraries(fuzz_safetensors_header PRIVATE ${config_lib})
  target_link_libraries(fuzz_config PRIVATE ${config_lib})
  target_link_libraries(fuzz_metric_line PRIVATE ${launch_lib})
  target_link_libraries(fuzz_run_record PRIVATE ${launch_lib})
  target_link_libraries(fuzz_trace_loader PRIVATE ${profiler_lib})
  target_link_libraries(fuzz_trace_caches PRIVATE ${profiler_lib})
endfunction()
