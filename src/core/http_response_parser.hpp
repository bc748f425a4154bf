// An incremental parser of the HTTP/1.x response to one webhook POST, for the plain client
// (http/plain_client.hpp). Bytes arrive as the socket gives them, split anywhere, so the
// parser is a state machine fed slice by slice; it keeps only what the delivery needs (the
// status, the start of the body, Retry-After, "webhook-delivery: abort") and how the
// connection may be reused, never the whole head or body: a receiver's response is
// untrusted input of any size.
//
// It reads what libcurl reads for the same request, so that switching client changes
// nothing a user can see:
// - interim 1xx responses (100 Continue, 102, 103) are skipped; only the final response's
//   status and headers count. 101 is an error: no protocol switch is ever asked for.
// - the body is framed as RFC 9112 section 6.3 says: none after 1xx, 204 and 304; chunked
//   when Transfer-Encoding ends with "chunked"; until the close for another
//   Transfer-Encoding; else Content-Length; else until the close.
// - a bare LF ends a line as well as CR LF; obs-fold continuation lines are ignored.
// A head (status line and headers, of one response) over 100 KiB is an error, and so is a
// chunk-size line or a trailer section over 100 KiB, so memory stays bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pg_outbox::core {

class HttpResponseParser {
 public:
  enum class State { kHead, kBody, kDone, kError };

  // body_head_limit: how much of the body body_head() keeps; retry_after_limit: where
  // retry_after() is cut.
  HttpResponseParser(std::size_t body_head_limit, std::size_t retry_after_limit);

  // Ready for the next response on the same connection.
  void reset();

  // Consumes bytes of the response; returns how many were used. Once the response is
  // complete (or failed) nothing more is used: bytes after the end of the response are
  // left to the caller, who sees feed() return less than data.size().
  std::size_t feed(std::string_view data);

  // The peer closed the connection: a body delimited by the close ends here (kDone);
  // anything else incomplete becomes kError. A response already done or failed stays so.
  void eof();

  State state() const { return state_; }
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kError; }
  // Why kError, a short English sentence.
  const std::string& error() const { return error_; }
  // At least one byte was fed since reset(): a closed connection before that is an empty
  // reply, which a reused connection may retry on a fresh one.
  bool started() const { return started_; }
  // The status of the final (non-1xx) response; 0 until its status line.
  long status() const { return status_; }
  // The first body_head_limit bytes of the body, de-chunked.
  const std::string& body_head() const { return body_head_; }
  // The final response's Retry-After (the last one if several), trimmed and cut at
  // retry_after_limit bytes; empty if none.
  const std::string& retry_after() const { return retry_after_; }
  // The final response had "webhook-delivery: abort" (name and value case-insensitive).
  bool delivery_abort() const { return delivery_abort_; }
  // Meaningful once done(): the connection may carry another request.
  bool keep_alive() const { return keep_alive_; }

 private:
  // How the body in progress ends, and where a chunked body is in its grammar.
  enum class Body {
    kLength,       // remaining_ more bytes
    kUntilClose,   // everything until eof()
    kChunkSize,    // the hex digits of a chunk-size line
    kChunkExt,     // after them: optional whitespace, ";ext", up to the LF
    kChunkSizeLf,  // a CR ended the chunk-size line: the LF must follow
    kChunkData,    // remaining_ more bytes of the chunk
    kChunkDataCr,  // the CR LF (or LF) after a chunk's data
    kChunkDataLf,  // the LF of that CR LF
    kTrailer,      // trailer lines after the last chunk, until an empty one
  };

  // What the headers of the response being read say, cleared at every status line so that
  // an interim response's headers never frame the final one.
  struct Framing {
    bool http10 = false;
    bool interim = false;  // a 1xx: another status line follows its head
    bool has_length = false;
    uint64_t length = 0;
    const char* length_error = nullptr;  // set by a bad Content-Length, raised if it frames the body
    bool has_transfer_encoding = false;
    bool chunked = false;     // the last transfer coding seen is "chunked"
    bool close = false;       // Connection: close
    bool keep_alive = false;  // Connection: keep-alive
  };

  std::size_t feed_head(std::string_view data);
  std::size_t feed_body(std::string_view data);
  std::size_t feed_chunk_syntax(char c);
  void on_status_line(std::string_view line);
  void on_header_line(std::string_view line);
  void on_content_length(std::string_view value);
  void end_of_head();
  void keep(std::string_view bytes);
  void finish() { state_ = State::kDone; }
  void fail(const char* why);

  const std::size_t body_head_limit_;
  const std::size_t retry_after_limit_;

  State state_ = State::kHead;
  Body body_ = Body::kUntilClose;
  bool expect_status_line_ = true;
  bool started_ = false;
  std::string line_;            // the head line being read (the head only)
  std::size_t head_bytes_ = 0;  // bytes of the current head, or chunk-size line, or trailer
  uint64_t remaining_ = 0;      // body or chunk bytes still to come
  unsigned chunk_digits_ = 0;
  bool chunk_ext_ = false;        // a ';' started the chunk extensions
  std::size_t trailer_line_ = 0;  // bytes of the current trailer line, CR aside
  Framing framing_;

  std::string error_;
  long status_ = 0;
  std::string body_head_;
  std::string retry_after_;
  bool delivery_abort_ = false;
  bool keep_alive_ = false;
};

}  // namespace pg_outbox::core
