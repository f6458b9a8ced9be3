// One rule for the programs' numeric options: CLI11 turns an empty value ("--rank ''") into
// 0 without a word, so `export --rank ''` exported rank 0. Options taking a number check
// ->check(ulysses::cli::kGiven) and an empty value is a usage error (exit 2).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ulysses::cli {

inline const CLI::Validator kGiven(
    [](std::string& v) { return v.empty() ? std::string("an empty value is not a number") : std::string(); }, "");

}  // namespace ulysses::cli
