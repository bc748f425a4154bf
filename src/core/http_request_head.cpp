#include "core/http_request_head.hpp"

#include "core/ascii.hpp"

#include "core/cpp_only.hpp"

namespace pg_outbox::core {
namespace {

// One caller line, as libcurl reads it.
struct Line {
  std::string_view name;
  std::string_view value;
  bool sent = true;  // false: "Name:" with nothing after the colon (removes the client's own)
};

Line read_line(std::string_view line) {
  Line l;
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) {
    const auto semicolon = line.find(';');
    // "Name;" (and "Name;   "): the header with an empty value. Neither: not a header
    // line at all, which libcurl skips.
    if (semicolon != std::string_view::npos)
      l.name = ascii_trim(line.substr(0, semicolon), kHeaderSpace);
    else
      l.sent = false;
    return l;
  }
  l.name = ascii_trim(line.substr(0, colon), kHeaderSpace);
  l.value = ascii_trim(line.substr(colon + 1), kHeaderSpace);
  l.sent = !l.value.empty();
  return l;
}

void append_header(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ", value.empty() ? 1 : 2);
  out.append(value);
  out.append("\r\n");
}

}  // namespace

std::string http_post_head(std::string_view target, std::string_view host, const HeaderLines& lines,
                           std::size_t body_size) {
  // What the caller's lines say about the client's own headers: replaced or removed.
  bool own_host = true;
  bool own_accept = true;
  bool own_content_type = true;
  std::size_t size = target.size() + host.size() + 96;
  for (std::string_view raw : lines) {
    const Line l = read_line(raw);
    size += raw.size() + 2;
    if (iequals(l.name, "Host"))
      own_host = false;
    else if (iequals(l.name, "Accept"))
      own_accept = false;
    else if (iequals(l.name, "Content-Type"))
      own_content_type = false;
  }

  std::string out;
  out.reserve(size);
  out.append("POST ");
  out.append(target);
  out.append(" HTTP/1.1\r\n");
  if (own_host) append_header(out, "Host", host);
  if (own_accept) append_header(out, "Accept", "*/*");
  for (std::string_view raw : lines) {
    const Line l = read_line(raw);
    // Framing is the client's: a body of exactly body_size bytes, no "100 Continue".
    if (!l.sent || iequals(l.name, "Content-Length") || iequals(l.name, "Expect") ||
        iequals(l.name, "Transfer-Encoding"))
      continue;
    append_header(out, l.name, l.value);
  }
  if (own_content_type) append_header(out, "Content-Type", "application/x-www-form-urlencoded");
  append_header(out, "Content-Length", std::to_string(body_size));
  out.append("\r\n");
  return out;
}

}  // namespace pg_outbox::core
