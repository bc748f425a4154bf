#include "core/http_response_parser.hpp"

#include "core/ascii.hpp"

#include <algorithm>
#include <limits>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {
namespace {

// 100 KiB, libcurl's CURL_MAX_HTTP_HEADER: far more than a webhook receiver ever sends, and
// applied to a chunk-size line and to the trailer section too, so no input grows memory.
constexpr std::size_t kMaxHeadBytes = 100 * 1024;
// 15 hex digits are 60 bits: a chunk size never overflows, and no real chunk comes near.
constexpr unsigned kMaxChunkDigits = 15;

constexpr std::string_view kListSpace = " \t";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Calls f with each element of a comma-separated header value, trimmed; empty ones too
// (Content-Length rejects them, the token lists skip them).
template <typename F>
void for_each_element(std::string_view value, F f) {
  for (;;) {
    const auto comma = value.find(',');
    f(ascii_trim(value.substr(0, comma), kListSpace));
    if (comma == std::string_view::npos) return;
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

HttpResponseParser::HttpResponseParser(std::size_t body_head_limit, std::size_t retry_after_limit)
    : body_head_limit_(body_head_limit), retry_after_limit_(retry_after_limit) {
  line_.reserve(256);
  reset();
}

void HttpResponseParser::reset() {
  state_ = State::kHead;
  body_ = Body::kUntilClose;
  expect_status_line_ = true;
  started_ = false;
  line_.clear();  // the capacity stays: the next response's head reuses it
  head_bytes_ = 0;
  remaining_ = 0;
  chunk_digits_ = 0;
  chunk_ext_ = false;
  trailer_line_ = 0;
  framing_ = Framing{};
  error_.clear();
  status_ = 0;
  body_head_.clear();
  retry_after_.clear();
  delivery_abort_ = false;
  keep_alive_ = false;
}

std::size_t HttpResponseParser::feed(std::string_view data) {
  if (data.empty() || done() || failed()) return 0;
  started_ = true;
  std::size_t used = 0;
  while (used < data.size() && (state_ == State::kHead || state_ == State::kBody))
    used += state_ == State::kHead ? feed_head(data.substr(used)) : feed_body(data.substr(used));
  return used;
}

void HttpResponseParser::eof() {
  if (state_ == State::kBody && body_ == Body::kUntilClose) return finish();
  if (done() || failed()) return;
  fail(started_ ? "the server closed the connection before the response was complete" : "Empty reply from server");
}

void HttpResponseParser::fail(const char* why) {
  state_ = State::kError;
  error_ = why;
  keep_alive_ = false;
}

// Takes in the head up to the end of one line at most; each whole line is handled as it ends.
std::size_t HttpResponseParser::feed_head(std::string_view data) {
  const auto lf = data.find('\n');
  const std::size_t n = lf == std::string_view::npos ? data.size() : lf + 1;
  // Something that is not HTTP/1.x (another protocol, HTTP/2's preface) fails at its first
  // wrong byte, without waiting for a line end that may never come. Like every error, it
  // is found at the same byte however the input is split, and feed() counts that byte.
  constexpr std::string_view kPrefix = "HTTP/1.";
  if (expect_status_line_ && line_.size() < kPrefix.size()) {
    const std::size_t checked = std::min(kPrefix.size() - line_.size(), n);
    for (std::size_t i = 0; i < checked; ++i) {
      if (data[i] != kPrefix[line_.size() + i]) {
        fail("the server's response is not HTTP/1.x");
        return i + 1;
      }
    }
  }
  if (n > kMaxHeadBytes - head_bytes_) {
    const std::size_t taken = kMaxHeadBytes - head_bytes_ + 1;  // up to the first byte too many
    fail("the server's response header is larger than 100 KiB");
    return taken;
  }
  head_bytes_ += n;
  line_.append(data.data(), lf == std::string_view::npos ? n : lf);
  if (lf == std::string_view::npos) return n;
  std::string_view line = line_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (expect_status_line_)
    on_status_line(line);
  else
    on_header_line(line);
  line_.clear();
  return n;
}

// "HTTP/1.1 200 OK": the version, one space, three digits, then nothing or a space and a
// reason phrase (possibly empty).
void HttpResponseParser::on_status_line(std::string_view line) {
  const bool version_ok = line.substr(0, 8) == "HTTP/1.1" || line.substr(0, 8) == "HTTP/1.0";
  if (!version_ok || line.size() < 12 || line[8] != ' ' || !is_digit(line[9]) || !is_digit(line[10]) ||
      !is_digit(line[11]) || line[9] == '0' || (line.size() > 12 && line[12] != ' ')) {
    // A status below 100 does not exist, and 0 is what status() says before a status line.
    return fail("the server's response is not HTTP/1.x");
  }
  const long code = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  if (code == 101) return fail("the server switched protocols, which was not asked for");
  expect_status_line_ = false;
  framing_ = Framing{};
  framing_.http10 = line[7] == '0';
  framing_.interim = code < 200;
  // Only the final response's headers count: an interim 103 may carry anything.
  retry_after_.clear();
  delivery_abort_ = false;
  if (!framing_.interim) status_ = code;
}

void HttpResponseParser::on_header_line(std::string_view line) {
  if (line.empty()) return end_of_head();
  // An obs-fold continuation: RFC 9112 lets a recipient drop it, and none of the fields we
  // read is ever folded in practice.
  if (line.front() == ' ' || line.front() == '\t') return;
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return fail("the server sent a header line without a colon");
  // The name is compared as written, as libcurl does: "Content-Length :" is another field.
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = ascii_trim(line.substr(colon + 1), kHeaderSpace);
  if (iequals(name, "Content-Length")) {
    on_content_length(value);
  } else if (iequals(name, "Transfer-Encoding")) {
    framing_.has_transfer_encoding = true;
    for_each_element(value, [this](std::string_view coding) {
      if (!coding.empty()) framing_.chunked = iequals(coding, "chunked");
    });
  } else if (iequals(name, "Connection")) {
    for_each_element(value, [this](std::string_view token) {
      if (iequals(token, "close")) framing_.close = true;
      if (iequals(token, "keep-alive")) framing_.keep_alive = true;
    });
  } else if (iequals(name, "Retry-After")) {
    retry_after_.assign(value.substr(0, retry_after_limit_));
  } else if (iequals(name, "webhook-delivery") && iequals(value, "abort")) {
    delivery_abort_ = true;
  }
}

// RFC 9112 section 6.3: several equal values ("5, 5", or the header twice) are one length;
// anything else is an error, raised only if Content-Length frames the body.
void HttpResponseParser::on_content_length(std::string_view value) {
  for_each_element(value, [this](std::string_view element) {
    if (framing_.length_error) return;
    uint64_t n = 0;
    if (element.empty()) {
      framing_.length_error = "the server sent an invalid Content-Length";
      return;
    }
    for (const char c : element) {
      if (!is_digit(c) || n > (std::numeric_limits<uint64_t>::max() - (c - '0')) / 10) {
        framing_.length_error = "the server sent an invalid Content-Length";
        return;
      }
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (framing_.has_length && n != framing_.length) {
      framing_.length_error = "the server sent conflicting Content-Length values";
      return;
    }
    framing_.has_length = true;
    framing_.length = n;
  });
}

void HttpResponseParser::end_of_head() {
  if (framing_.interim) {
    expect_status_line_ = true;  // its Framing is cleared by the next status line
    head_bytes_ = 0;
    return;
  }
  const Framing& f = framing_;
  keep_alive_ = f.http10 ? f.keep_alive && !f.close : !f.close;
  if (status_ == 204 || status_ == 304) return finish();  // no body, whatever the headers say
  state_ = State::kBody;
  if (f.has_transfer_encoding) {
    // RFC 9112 section 6.1: Transfer-Encoding in an HTTP/1.0 message, or next to a
    // Content-Length, is a framing to distrust; the connection ends with this response.
    if (f.http10 || f.has_length || f.length_error) keep_alive_ = false;
    if (!f.chunked) {
      body_ = Body::kUntilClose;
      keep_alive_ = false;
      return;
    }
    body_ = Body::kChunkSize;
    head_bytes_ = 0;
    return;
  }
  if (f.length_error) return fail(f.length_error);
  if (f.has_length) {
    if (f.length == 0) return finish();
    body_ = Body::kLength;
    remaining_ = f.length;
    return;
  }
  body_ = Body::kUntilClose;
  keep_alive_ = false;
}

void HttpResponseParser::keep(std::string_view bytes) {
  if (body_head_.size() < body_head_limit_)
    body_head_.append(bytes.data(), std::min(bytes.size(), body_head_limit_ - body_head_.size()));
}

std::size_t HttpResponseParser::feed_body(std::string_view data) {
  switch (body_) {
    case Body::kUntilClose:
      keep(data);
      return data.size();
    case Body::kLength:
    case Body::kChunkData: {
      const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(remaining_, data.size()));
      keep(data.substr(0, n));
      remaining_ -= n;
      if (remaining_ == 0 && body_ == Body::kLength) finish();
      if (remaining_ == 0 && body_ == Body::kChunkData) body_ = Body::kChunkDataCr;
      return n;
    }
    default:
      return feed_chunk_syntax(data.front());
  }
}

// One byte of a chunked body's framing (RFC 9112 section 7.1): chunk-size [ext] CRLF,
// data CRLF, ..., "0" [ext] CRLF, trailer lines, CRLF. Always takes the byte.
std::size_t HttpResponseParser::feed_chunk_syntax(char c) {
  const bool size_line = body_ == Body::kChunkSize || body_ == Body::kChunkExt || body_ == Body::kChunkSizeLf;
  if ((size_line || body_ == Body::kTrailer) && ++head_bytes_ > kMaxHeadBytes) {
    fail(size_line ? "the server sent a chunk-size line larger than 100 KiB"
                   : "the server sent a trailer section larger than 100 KiB");
    return 1;
  }
  const auto end_of_size_line = [this] {
    head_bytes_ = 0;
    body_ = remaining_ == 0 ? Body::kTrailer : Body::kChunkData;
  };
  switch (body_) {
    case Body::kChunkSize:
      if (const int v = hex_value(c); v >= 0) {
        if (++chunk_digits_ > kMaxChunkDigits) {
          fail("the server sent a chunk size of more than 15 hex digits");
          return 1;
        }
        remaining_ = remaining_ * 16 + static_cast<uint64_t>(v);
        return 1;
      }
      if (chunk_digits_ == 0) {
        fail(c == '\r' || c == '\n' || c == ';' || c == ' ' || c == '\t'
                 ? "the server sent a chunk without a size"
                 : "the server sent a chunk size that is not hexadecimal");
        return 1;
      }
      body_ = Body::kChunkExt;
      [[fallthrough]];
    case Body::kChunkExt:
      // Whitespace may come before the ';' of the extensions, which are skipped whole.
      if (c == '\n')
        end_of_size_line();
      else if (c == '\r')
        body_ = Body::kChunkSizeLf;
      else if (c == ';')
        chunk_ext_ = true;
      else if (!chunk_ext_ && c != ' ' && c != '\t')
        fail("the server sent a chunk size that is not hexadecimal");
      return 1;
    case Body::kChunkSizeLf:
      if (c == '\n')
        end_of_size_line();
      else
        fail("the server sent a chunk-size line with a CR not followed by LF");
      return 1;
    case Body::kChunkDataCr:
    case Body::kChunkDataLf:
      if (c == '\r' && body_ == Body::kChunkDataCr) {
        body_ = Body::kChunkDataLf;
      } else if (c == '\n') {
        body_ = Body::kChunkSize;  // the next chunk
        chunk_digits_ = 0;
        chunk_ext_ = false;
      } else {
        fail("the server sent a chunk not followed by CRLF");
      }
      return 1;
    case Body::kTrailer:
      // Trailer fields are not read (none of ours may come there); an empty line ends them.
      if (c == '\n') {
        if (trailer_line_ == 0) finish();
        trailer_line_ = 0;
      } else if (c != '\r') {
        ++trailer_line_;
      }
      return 1;
    default:
      return 1;  // not reached: feed_body() handles the data states
  }
}

}  // namespace pg_outbox::core
