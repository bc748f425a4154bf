#include "core/header_lines.hpp"

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

HeaderLines::HeaderLines(std::initializer_list<std::string_view> lines) {
  for (std::string_view line : lines) add(line);
}

void HeaderLines::add(std::string_view line) {
  buffer_.append(line);
  buffer_.push_back('\0');
  ++count_;
}

void HeaderLines::add(std::string_view name, std::string_view value) {
  buffer_.append(name);
  if (value.empty()) {
    buffer_.push_back(';');
  } else {
    buffer_.append(": ");
    buffer_.append(value);
  }
  buffer_.push_back('\0');
  ++count_;
}

bool HeaderLines::replace_first(std::string_view prefix, std::string_view line) {
  for (std::size_t at = 0; at < buffer_.size();) {
    const std::size_t length = std::string_view(buffer_.data() + at).size();
    if (std::string_view(buffer_.data() + at, length).substr(0, prefix.size()) == prefix) {
      buffer_.replace(at, length, line);
      return true;
    }
    at += length + 1;
  }
  return false;
}

}  // namespace pg_outbox::core
