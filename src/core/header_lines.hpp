// The header lines of one request, in one buffer: each line in libcurl's
// CURLOPT_HTTPHEADER spelling ("Name: value", "Name;" for an empty value, "Name:" to
// remove a header the client adds itself), followed by a NUL, so that libcurl can be
// handed each line where it lies (http/transfer.cpp) and the plain client can read them
// in order (core/http_request_head.hpp). A request's lines are one allocation: as a
// vector of strings they were one each, made by the worker's main thread and freed by
// the delivery thread (perf of an HTTP drain: the requests' making 8.1 -> 6.6 % of the
// main thread, the freeing of a finished exchange 7.3 -> 4.2 % of the delivery thread).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>

namespace pg_outbox::core {

class HeaderLines {
 public:
  HeaderLines() = default;
  HeaderLines(std::initializer_list<std::string_view> lines);

  // Room for lines of `bytes` characters in all (NULs included).
  void reserve(std::size_t bytes) { buffer_.reserve(bytes); }
  // A line as given: it must hold no NUL, CR or LF (the caller checked its parts).
  void add(std::string_view line);
  // "Name: value", or "Name;" when the value is empty.
  void add(std::string_view name, std::string_view value);
  // The first line that starts with `prefix` becomes `line`; false when there is none.
  bool replace_first(std::string_view prefix, std::string_view line);

  std::size_t size() const { return count_; }
  std::size_t bytes() const { return buffer_.size(); }  // the lines' characters and their NULs
  bool empty() const { return count_ == 0; }
  bool operator==(const HeaderLines& other) const { return buffer_ == other.buffer_; }
  bool operator!=(const HeaderLines& other) const { return buffer_ != other.buffer_; }

  // The lines in order, each a view whose data() is NUL-terminated. An iterator measures
  // its line once; at the end it stands on the string's own terminating NUL (a line of
  // length 0 that is never read).
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = const std::string_view*;
    using reference = std::string_view;
    const_iterator() = default;
    explicit const_iterator(const char* at) : line_(at) {}
    std::string_view operator*() const { return line_; }
    const_iterator& operator++() {
      line_ = std::string_view(line_.data() + line_.size() + 1);
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const const_iterator& other) const { return line_.data() == other.line_.data(); }
    bool operator!=(const const_iterator& other) const { return line_.data() != other.line_.data(); }

   private:
    std::string_view line_;
  };
  const_iterator begin() const { return const_iterator(buffer_.c_str()); }
  const_iterator end() const { return const_iterator(buffer_.c_str() + buffer_.size()); }

 private:
  std::string buffer_;  // the lines, each followed by '\0'
  std::size_t count_ = 0;
};

}  // namespace pg_outbox::core
