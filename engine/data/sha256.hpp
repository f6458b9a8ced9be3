// SHA-256 of a file, for the tokenizer a dataset was made with (its manifest names it).
#pragma once

#include <string>
#include <string_view>

namespace ulysses::data {

// Lower-case hex digest of `bytes` (FIPS 180-4).
std::string sha256_hex(std::string_view bytes);

}  // namespace ulysses::data
