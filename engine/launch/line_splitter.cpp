// Line splitting of worker output streams (see line_splitter.hpp).
#include "line_splitter.hpp"

namespace ulysses::launch {

namespace {
std::string strip_cr(std::string s) {
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}
}  // namespace

std::vector<std::string> LineSplitter::feed(std::string_view data) {
  std::vector<std::string> lines;
  while (!data.empty()) {
    const auto nl = data.find('\n');
    const std::string_view piece = nl == std::string_view::npos ? data : data.substr(0, nl);
    // Cut overlong lines at max_line_ bytes.
    const std::size_t room = max_line_ > pending_.size() ? max_line_ - pending_.size() : 0;
    if (piece.size() > room) {
      pending_.append(piece.substr(0, room));
      lines.push_back(strip_cr(std::move(pending_)));
      pending_.clear();
      data.remove_prefix(room);
      continue;
    }
    pending_.append(piece);
    if (nl == std::string_view::npos) break;
    lines.push_back(strip_cr(std::move(pending_)));
    pending_.clear();
    data.remove_prefix(nl + 1);
  }
  return lines;
}

std::optional<std::string> LineSplitter::finish() {
  if (pending_.empty()) return std::nullopt;
  std::string s = strip_cr(std::move(pending_));
  pending_.clear();
  return s;
}

}  // namespace ulysses::launch
