#include "core/http_response_parser.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <tuple>
#include <vector>

using namespace pg_outbox::core;
using State = HttpResponseParser::State;

namespace {

// The plain client's limits (http/http_client.hpp, http/response_capture.hpp).
constexpr std::size_t kBodyLimit = 1027;
constexpr std::size_t kRetryLimit = 128;
constexpr std::size_t k100KiB = 100 * 1024;

// Everything a caller can observe once it has fed a response (and maybe closed).
struct Outcome {
  State state;
  std::string error;
  long status;
  std::string body_head;
  std::string retry_after;
  bool delivery_abort;
  bool keep_alive;
  bool started;
  std::size_t used;  // the sum of what feed() returned

  auto tie() const {
    return std::tie(state, error, status, body_head, retry_after, delivery_abort, keep_alive, started, used);
  }
  bool operator==(const Outcome& o) const { return tie() == o.tie(); }
  bool operator!=(const Outcome& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "{state " << static_cast<int>(o.state) << ", error \"" << o.error << "\", status " << o.status
            << ", body_head \"" << o.body_head << "\", retry_after \"" << o.retry_after << "\", abort "
            << o.delivery_abort << ", keep_alive " << o.keep_alive << ", started " << o.started << ", used " << o.used
            << "}";
}

struct Options {
  bool eof = false;  // the peer closes after sending everything
  std::size_t body_limit = kBodyLimit;
  std::size_t retry_limit = kRetryLimit;
};

Outcome observe(const HttpResponseParser& p, std::size_t used) {
  return {p.state(),          p.error(),      p.status(),  p.body_head(), p.retry_after(),
          p.delivery_abort(), p.keep_alive(), p.started(), used};
}

// Feeds wire cut at the given offsets (ascending), every piece even after the end, as a
// socket would hand them over; then closes if asked.
Outcome run(std::string_view wire, const std::vector<std::size_t>& cuts, const Options& o) {
  HttpResponseParser p(o.body_limit, o.retry_limit);
  std::size_t used = 0;
  std::size_t from = 0;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    const std::size_t to = i < cuts.size() ? cuts[i] : wire.size();
    const std::size_t n = p.feed(wire.substr(from, to - from));
    EXPECT_LE(n, to - from);
    used += n;
    from = to;
  }
  if (o.eof) p.eof();
  return observe(p, used);
}

// Parses wire whole, then one byte at a time, then (when short) cut in two at every offset:
// every way must give the same outcome, which is returned.
Outcome parse(std::string_view wire, const Options& o = {}) {
  const Outcome whole = run(wire, {}, o);
  std::vector<std::size_t> every_byte;
  for (std::size_t i = 1; i < wire.size(); ++i) every_byte.push_back(i);
  EXPECT_EQ(run(wire, every_byte, o), whole) << "fed one byte at a time";
  if (wire.size() <= 2048) {
    for (std::size_t at = 1; at < wire.size(); ++at) {
      const Outcome split = run(wire, {at}, o);
      if (split != whole) {
        ADD_FAILURE() << "cut at " << at << ": " << split << " instead of " << whole;
        break;
      }
    }
  }
  return whole;
}

Outcome parse_then_close(std::string_view wire) { return parse(wire, Options{true}); }

const std::string kChunkedHead = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

}  // namespace

TEST(HttpResponseParser, ContentLengthBody) {
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
  const Outcome r = parse(wire);
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body_head, "hello");
  EXPECT_EQ(r.used, wire.size());
  EXPECT_TRUE(r.keep_alive);
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.retry_after, "");
  EXPECT_FALSE(r.delivery_abort);
}

TEST(HttpResponseParser, ContentLengthBodyIsNotDoneBeforeItsLastByte) {
  const Outcome r = parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhell");
  EXPECT_EQ(r.state, State::kBody);
  EXPECT_EQ(r.body_head, "hell");
  EXPECT_EQ(r.status, 200);
}

TEST(HttpResponseParser, ZeroLengthIsDoneRightAfterTheHead) {
  const std::string response = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
  const Outcome r = parse(response + "XYZ");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body_head, "");
  EXPECT_EQ(r.used, response.size());
  EXPECT_TRUE(r.keep_alive);
}

TEST(HttpResponseParser, BareLineFeedsEndLines) {
  const Outcome r = parse("HTTP/1.1 201 Created\nContent-Length: 2\n\nok");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body_head, "ok");
  const Outcome chunked = parse("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nok\n0\n\n");
  EXPECT_EQ(chunked.state, State::kDone);
  EXPECT_EQ(chunked.body_head, "ok");
}

TEST(HttpResponseParser, HeaderNamesAreCaseInsensitive) {
  const Outcome r = parse("HTTP/1.1 200 OK\r\ncontent-LENGTH: 2\r\nCONNECTION: CLOSE\r\n\r\nok");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.body_head, "ok");
  EXPECT_FALSE(r.keep_alive);
}

TEST(HttpResponseParser, StatusLinesWithAndWithoutAReason) {
  EXPECT_EQ(parse("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n").status, 200);
  EXPECT_EQ(parse("HTTP/1.1 418 \r\nContent-Length: 0\r\n\r\n").status, 418);
  EXPECT_EQ(parse("HTTP/1.0 503 Service  Unavailable, try later\r\nContent-Length: 0\r\n\r\n").status, 503);
  EXPECT_EQ(parse("HTTP/1.1 299 Whatever: it is\r\nContent-Length: 0\r\n\r\n").state, State::kDone);
}

TEST(HttpResponseParser, NoBodyAfter204Or304WhateverTheHeadersSay) {
  for (const std::string head :
       {"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nContent-Length: nonsense\r\n\r\n", "HTTP/1.1 204 No Content\r\n\r\n"}) {
    SCOPED_TRACE(head);
    const Outcome r = parse(head + "hello");
    EXPECT_EQ(r.state, State::kDone);
    EXPECT_EQ(r.used, head.size());
    EXPECT_EQ(r.body_head, "");
    EXPECT_TRUE(r.keep_alive);
  }
}

TEST(HttpResponseParser, ChunkedWithExtensionsAndTrailers) {
  const std::string response = kChunkedHead +
                               "5;name=value\r\nhello\r\n"
                               "6 ; a=b ; c=\"d\"\r\n world\r\n"
                               "000000000000001\r\n!\r\n"
                               "0;last\r\n"
                               "X-Trailer: 1\r\nY: 2\r\n\r\n";
  const Outcome r = parse(response + "HTTP/1.1 200 OK\r\n");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.body_head, "hello world!");
  EXPECT_EQ(r.used, response.size());
  EXPECT_TRUE(r.keep_alive);
}

TEST(HttpResponseParser, ChunkSizesInEitherCaseAndBadWhitespaceBeforeTheLineEnd) {
  const std::string data(0x1A, 'x');
  const Outcome r = parse(kChunkedHead + "1a\r\n" + data + "\r\n1A \r\n" + data + "\r\n0\r\n\r\n");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.body_head, data + data);
}

TEST(HttpResponseParser, EmptyChunkedBody) {
  const Outcome r = parse(kChunkedHead + "0\r\n\r\n");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.body_head, "");
}

TEST(HttpResponseParser, ChunkedIsNotDoneWithoutTheEmptyLineAfterTheTrailers) {
  EXPECT_EQ(parse(kChunkedHead + "2\r\nok\r\n0\r\n").state, State::kBody);
  EXPECT_EQ(parse(kChunkedHead + "2\r\nok\r\n0\r\nX: y\r\n").state, State::kBody);
  EXPECT_EQ(parse(kChunkedHead + "2\r\nok\r\n0\r\nX: y\r\n\r").state, State::kBody);
}

TEST(HttpResponseParser, MalformedChunks) {
  struct Case {
    std::string body;
    std::string error;
  };
  const std::string kNoSize = "the server sent a chunk without a size";
  const std::string kNotHex = "the server sent a chunk size that is not hexadecimal";
  const std::string kNoCrlf = "the server sent a chunk not followed by CRLF";
  for (const Case& c : std::vector<Case>{
           {"\r\n", kNoSize},
           {";ext\r\n", kNoSize},
           {" 5\r\n", kNoSize},
           {"g\r\n", kNotHex},
           {"-5\r\n", kNotHex},
           {"0x5\r\n", kNotHex},
           {"5x\r\nhello\r\n", kNotHex},
           {"5 x\r\nhello\r\n", kNotHex},
           {"0000000000000005\r\nhello\r\n", "the server sent a chunk size of more than 15 hex digits"},
           {"5\rX", "the server sent a chunk-size line with a CR not followed by LF"},
           {"5\r\nhelloX\r\n", kNoCrlf},
           {"5\r\nhello\rX", kNoCrlf},
           {"5\r\nhello\r\r\n", kNoCrlf},
           {"2\r\nok\r\n\r\n0\r\n\r\n", kNoSize},
       }) {
    SCOPED_TRACE(c.body);
    const Outcome r = parse(kChunkedHead + c.body);
    EXPECT_EQ(r.state, State::kError);
    EXPECT_EQ(r.error, c.error);
    EXPECT_FALSE(r.keep_alive);
    EXPECT_EQ(r.status, 200);
  }
}

TEST(HttpResponseParser, OversizedChunkLineAndTrailerSection) {
  const std::string ext = ";" + std::string(k100KiB, 'e');
  EXPECT_EQ(parse(kChunkedHead + "5" + ext.substr(0, k100KiB - 3) + "\r\nhello\r\n0\r\n\r\n").state, State::kDone);
  const Outcome line = parse(kChunkedHead + "5" + ext + "\r\n");
  EXPECT_EQ(line.state, State::kError);
  EXPECT_EQ(line.error, "the server sent a chunk-size line larger than 100 KiB");

  const std::string trailer = "X: " + std::string(k100KiB, 't') + "\r\n";
  const Outcome r = parse(kChunkedHead + "0\r\n" + trailer + "\r\n");
  EXPECT_EQ(r.state, State::kError);
  EXPECT_EQ(r.error, "the server sent a trailer section larger than 100 KiB");
}

TEST(HttpResponseParser, TransferEncodingFraming) {
  // The last coding decides; several headers make one list.
  for (const std::string te :
       {"Transfer-Encoding: gzip, CHUNKED", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: Chunked", "Transfer-Encoding: chunked,\r\nTransfer-Encoding:"}) {
    SCOPED_TRACE(te);
    const Outcome r = parse("HTTP/1.1 200 OK\r\n" + te + "\r\n\r\n2\r\nok\r\n0\r\n\r\n");
    EXPECT_EQ(r.state, State::kDone);
    EXPECT_EQ(r.body_head, "ok");
    EXPECT_TRUE(r.keep_alive);
  }
  // Not ending in chunked: the body runs until the close, framing bytes and all.
  for (const std::string te : {"Transfer-Encoding: chunked, gzip", "Transfer-Encoding: identity",
                               "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip"}) {
    SCOPED_TRACE(te);
    const std::string wire = "HTTP/1.1 200 OK\r\n" + te + "\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n";
    EXPECT_EQ(parse(wire).state, State::kBody);
    const Outcome r = parse_then_close(wire);
    EXPECT_EQ(r.state, State::kDone);
    EXPECT_EQ(r.body_head, "2\r\nok\r\n0\r\n\r\n");
    EXPECT_FALSE(r.keep_alive);
  }
}

TEST(HttpResponseParser, ChunkedWinsOverContentLengthButTheConnectionCloses) {
  for (const std::string cl : {"Content-Length: 100", "Content-Length: nonsense", "Content-Length: 1, 2"}) {
    SCOPED_TRACE(cl);
    const Outcome r = parse("HTTP/1.1 200 OK\r\n" + cl + "\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n");
    EXPECT_EQ(r.state, State::kDone);
    EXPECT_EQ(r.body_head, "ok");
    EXPECT_FALSE(r.keep_alive);
  }
}

TEST(HttpResponseParser, EqualContentLengthsAreOne) {
  for (const std::string cl :
       {"Content-Length: 2", "Content-Length:   2  ", "Content-Length:\t2", "Content-Length: 2,2",
        "Content-Length: 2 , 2", "Content-Length: 2\r\nContent-Length: 2", "Content-Length: 002"}) {
    SCOPED_TRACE(cl);
    const Outcome r = parse("HTTP/1.1 200 OK\r\n" + cl + "\r\n\r\nok");
    EXPECT_EQ(r.state, State::kDone);
    EXPECT_EQ(r.body_head, "ok");
  }
}

TEST(HttpResponseParser, InvalidOrConflictingContentLength) {
  const std::string kInvalid = "the server sent an invalid Content-Length";
  const std::string kConflicting = "the server sent conflicting Content-Length values";
  for (const auto& [cl, error] : std::vector<std::pair<std::string, std::string>>{
           {"Content-Length: 2, 3", kConflicting},
           {"Content-Length: 2\r\nContent-Length: 3", kConflicting},
           {"Content-Length: 0\r\nContent-Length: 2, 2", kConflicting},
           {"Content-Length:", kInvalid},
           {"Content-Length: abc", kInvalid},
           {"Content-Length: -1", kInvalid},
           {"Content-Length: +2", kInvalid},
           {"Content-Length: 0x2", kInvalid},
           {"Content-Length: 2 2", kInvalid},
           {"Content-Length: 2;", kInvalid},
           {"Content-Length: 2,", kInvalid},
           {"Content-Length: ,2", kInvalid},
           {"Content-Length: 2\r\nContent-Length: x", kInvalid},
           {"Content-Length: 18446744073709551616", kInvalid},
           {"Content-Length: 99999999999999999999999", kInvalid},
       }) {
    SCOPED_TRACE(cl);
    const Outcome r = parse("HTTP/1.1 200 OK\r\n" + cl + "\r\n\r\nok");
    EXPECT_EQ(r.state, State::kError);
    EXPECT_EQ(r.error, error);
    EXPECT_EQ(r.status, 200);
  }
  // The largest value that fits is a length (of a body that will not all come).
  const Outcome huge = parse("HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\nok");
  EXPECT_EQ(huge.state, State::kBody);
  EXPECT_EQ(huge.body_head, "ok");
}

TEST(HttpResponseParser, InterimResponsesAreSkipped) {
  const Outcome r = parse(
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 102 Processing\r\nX: y\r\n\r\n"
      "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body_head, "ok");
  EXPECT_TRUE(r.keep_alive);
}

TEST(HttpResponseParser, StatusIsZeroUntilTheFinalStatusLine) {
  HttpResponseParser p(kBodyLimit, kRetryLimit);
  p.feed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2");
  EXPECT_EQ(p.status(), 0);
  EXPECT_EQ(p.state(), State::kHead);
  p.feed("04 No Content\r\n");
  EXPECT_EQ(p.status(), 204);
  EXPECT_EQ(p.state(), State::kHead);
  p.feed("\r\n");
  EXPECT_TRUE(p.done());
}

TEST(HttpResponseParser, AnInterimResponsesHeadersFrameNothing) {
  // The 103's Content-Length, Connection, Retry-After and abort belong to it alone.
  const Outcome r = parse_then_close(
      "HTTP/1.1 103 Early Hints\r\nContent-Length: 3\r\nConnection: close\r\nRetry-After: 5\r\n"
      "webhook-delivery: abort\r\n\r\n"
      "HTTP/1.1 200 OK\r\n\r\nbody");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.body_head, "body");
  EXPECT_EQ(r.retry_after, "");
  EXPECT_FALSE(r.delivery_abort);
  EXPECT_FALSE(r.keep_alive);  // until the close

  const Outcome kept = parse("HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n");
  EXPECT_TRUE(kept.keep_alive);
}

TEST(HttpResponseParser, SwitchingProtocolsIsAnError) {
  const Outcome r = parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n");
  EXPECT_EQ(r.state, State::kError);
  EXPECT_EQ(r.error, "the server switched protocols, which was not asked for");
  EXPECT_EQ(r.status, 0);
}

TEST(HttpResponseParser, RetryAfterOfTheFinalResponseOnly) {
  const Outcome r = parse(
      "HTTP/1.1 103 Early Hints\r\nRetry-After: 1\r\n\r\n"
      "HTTP/1.1 503 Service Unavailable\r\nRetry-After:\t 120 \t\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.retry_after, "120");
  // Several: the last one, as libcurl's header callback keeps it.
  EXPECT_EQ(parse("HTTP/1.1 429 Too Many\r\nretry-after: 1\r\nRETRY-AFTER: 2\r\nContent-Length: 0\r\n\r\n").retry_after,
            "2");
  EXPECT_EQ(parse("HTTP/1.1 429 Too Many\r\nRetry-After:    \r\nContent-Length: 0\r\n\r\n").retry_after, "");
}

TEST(HttpResponseParser, RetryAfterIsTruncated) {
  const std::string wire =
      "HTTP/1.1 503 Busy\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\nContent-Length: 0\r\n\r\n";
  Options o;
  o.retry_limit = 8;
  EXPECT_EQ(parse(wire, o).retry_after, "Wed, 21 ");
  o.retry_limit = 0;
  EXPECT_EQ(parse(wire, o).retry_after, "");
  EXPECT_EQ(parse(wire).retry_after, "Wed, 21 Oct 2015 07:28:00 GMT");
}

TEST(HttpResponseParser, WebhookDeliveryAbort) {
  for (const std::string line : {"webhook-delivery: abort", "WEBHOOK-Delivery:   AbOrT  ", "webhook-delivery:abort",
                                 "webhook-delivery: abort\r\nwebhook-delivery: later"}) {
    SCOPED_TRACE(line);
    EXPECT_TRUE(parse("HTTP/1.1 410 Gone\r\n" + line + "\r\nContent-Length: 0\r\n\r\n").delivery_abort);
  }
  for (const std::string line :
       {"webhook-delivery: aborted", "webhook-delivery: do abort", "webhook-delivery:", "x-webhook-delivery: abort",
        "webhook-delivery-mode: abort", "webhook-delivery abort"}) {
    SCOPED_TRACE(line);
    const Outcome r = parse("HTTP/1.1 410 Gone\r\n" + line + "\r\nContent-Length: 0\r\n\r\n");
    EXPECT_FALSE(r.delivery_abort);
  }
}

TEST(HttpResponseParser, KeepAlive) {
  struct Case {
    std::string wire;
    bool keep_alive;
  };
  for (const Case& c : std::vector<Case>{
           {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
           {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false},
           {"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", false},
           {"HTTP/1.1 200 OK\r\nConnection: Upgrade\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false},
           {"HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n", true},
           {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
           {"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false},
           {"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", true},
           {"HTTP/1.0 200 OK\r\nConnection: foo ,keep-alive\r\nContent-Length: 2\r\n\r\nok", true},
           {"HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", false},
           {"HTTP/1.0 204 No Content\r\n\r\n", false},
           {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
       }) {
    SCOPED_TRACE(c.wire);
    const Outcome r = parse(c.wire);
    EXPECT_EQ(r.state, State::kDone);
    EXPECT_EQ(r.keep_alive, c.keep_alive);
  }
}

TEST(HttpResponseParser, ReadUntilClose) {
  const std::string wire = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\nabc";
  const Outcome open = parse(wire);
  EXPECT_EQ(open.state, State::kBody);
  EXPECT_EQ(open.body_head, "abc");
  EXPECT_EQ(open.used, wire.size());
  const Outcome closed = parse_then_close(wire);
  EXPECT_EQ(closed.state, State::kDone);
  EXPECT_EQ(closed.body_head, "abc");
  EXPECT_FALSE(closed.keep_alive);
  EXPECT_EQ(closed.error, "");
  // An empty body until the close, and HTTP/1.0's usual way.
  EXPECT_EQ(parse_then_close("HTTP/1.1 200 OK\r\n\r\n").state, State::kDone);
  const Outcome old = parse_then_close("HTTP/1.0 500 Oops\r\nConnection: keep-alive\r\n\r\nbroken");
  EXPECT_EQ(old.state, State::kDone);
  EXPECT_EQ(old.status, 500);
  EXPECT_EQ(old.body_head, "broken");
  EXPECT_FALSE(old.keep_alive);
}

TEST(HttpResponseParser, CloseBeforeTheEndIsAnError) {
  const std::string kEarly = "the server closed the connection before the response was complete";
  for (const std::string wire :
       {"H", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\nContent-Le", "HTTP/1.1 100 Continue\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n"}) {
    SCOPED_TRACE(wire);
    const Outcome r = parse_then_close(wire);
    EXPECT_EQ(r.state, State::kError);
    EXPECT_EQ(r.error, kEarly);
    EXPECT_FALSE(r.keep_alive);
    EXPECT_TRUE(r.started);
  }
  // What came before the close is still there to report.
  const Outcome r = parse_then_close("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\n\r\nhel");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.body_head, "hel");
}

TEST(HttpResponseParser, EmptyReply) {
  HttpResponseParser p(kBodyLimit, kRetryLimit);
  EXPECT_FALSE(p.started());
  EXPECT_EQ(p.feed(""), 0u);
  EXPECT_FALSE(p.started());
  p.eof();
  EXPECT_TRUE(p.failed());
  EXPECT_EQ(p.error(), "Empty reply from server");
  EXPECT_EQ(p.status(), 0);
}

TEST(HttpResponseParser, CloseAfterTheEndChangesNothing) {
  const Outcome done = parse_then_close("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_EQ(done.state, State::kDone);
  EXPECT_TRUE(done.keep_alive);  // the caller sees the close when it next reads
  const Outcome failed = parse_then_close("HTTP/1.1 200 OK\r\nno colon\r\n");
  EXPECT_EQ(failed.error, "the server sent a header line without a colon");
}

TEST(HttpResponseParser, NotHttp1) {
  for (const std::string line : {"HTTP/2 200 OK",      "HTTP/2.0 200 OK",  "HTTP/1.2 200 OK",     "http/1.1 200 OK",
                                 "HTTP/1.1 20 OK",     "HTTP/1.1 2000 OK", "HTTP/1.1 200OK",      "HTTP/1.1  200 OK",
                                 "HTTP/1.1\t200 OK",   "HTTP/1.1 099 Low", "HTTP/1.1 000",        "HTTP/1.1 abc OK",
                                 "HTTP/1.1 2x0 OK",    "HTTP/1.1",         "HTTP/1.1 ",           "HTTP/1.1 20",
                                 " HTTP/1.1 200 OK",   "<html>",           "SSH-2.0-OpenSSH_9.2", "",
                                 "\r\nHTTP/1.1 200 OK"}) {
    SCOPED_TRACE(line);
    const Outcome r = parse(line + "\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ(r.state, State::kError);
    EXPECT_EQ(r.error, "the server's response is not HTTP/1.x");
    EXPECT_EQ(r.status, 0);
  }
}

TEST(HttpResponseParser, NotHttp1FailsBeforeTheLineEnds) {
  for (const std::string start : {"SSH-2.0-OpenSSH_9.2", "HTTP/2", "PRI * HTTP/2.0", "\x16\x03\x01"}) {
    SCOPED_TRACE(start);
    EXPECT_EQ(parse(start).state, State::kError);
  }
  // feed() counts the bytes up to the one that gave it away.
  HttpResponseParser p(kBodyLimit, kRetryLimit);
  EXPECT_EQ(p.feed("HTTP/2 200 OK\r\n\r\n"), 6u);
  EXPECT_TRUE(p.failed());
  EXPECT_EQ(parse("HTTP/1.").state, State::kHead);
  EXPECT_EQ(parse("HTTP/1.1 200 OK").state, State::kHead);
}

TEST(HttpResponseParser, HeaderLinesAndFolding) {
  const Outcome bad = parse("HTTP/1.1 200 OK\r\nBogus\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(bad.state, State::kError);
  EXPECT_EQ(bad.error, "the server sent a header line without a colon");
  // A continuation line adds nothing to the field it follows.
  const Outcome folded = parse(
      "HTTP/1.1 200 OK\r\nX-A: 1\r\n continued\r\n\tmore: text\r\nRetry-After: 7\r\n 8\r\n"
      "Content-Length: 2\r\n\r\nok");
  EXPECT_EQ(folded.state, State::kDone);
  EXPECT_EQ(folded.retry_after, "7");
  EXPECT_EQ(folded.body_head, "ok");
  // A name followed by space before its colon is another field, as for libcurl.
  const Outcome spaced = parse_then_close("HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nok");
  EXPECT_EQ(spaced.state, State::kDone);
  EXPECT_EQ(spaced.body_head, "ok");
}

TEST(HttpResponseParser, BytesAfterTheResponseAreLeftUnconsumed) {
  const std::string response = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const Outcome r = parse(response + "HTTP/1.1 200 OK\r\n");
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.used, response.size());
  EXPECT_EQ(r.body_head, "ok");

  HttpResponseParser p(kBodyLimit, kRetryLimit);
  EXPECT_EQ(p.feed(response + "junk"), response.size());
  EXPECT_EQ(p.feed("more"), 0u);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.body_head(), "ok");
}

TEST(HttpResponseParser, NothingIsUsedAfterAnError) {
  HttpResponseParser p(kBodyLimit, kRetryLimit);
  p.feed("HTTP/1.1 200 OK\r\nBogus\r\n");
  ASSERT_TRUE(p.failed());
  EXPECT_EQ(p.feed("Content-Length: 0\r\n\r\n"), 0u);
  EXPECT_TRUE(p.failed());
  EXPECT_EQ(p.error(), "the server sent a header line without a colon");
}

TEST(HttpResponseParser, ResetBetweenTwoResponsesOnOneConnection) {
  const std::string first =
      "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\nwebhook-delivery: abort\r\nContent-Length: 4\r\n\r\nbusy";
  const std::string second = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
  const std::string wire = first + second;
  HttpResponseParser p(kBodyLimit, kRetryLimit);
  ASSERT_EQ(p.feed(wire), first.size());
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.status(), 503);
  EXPECT_EQ(p.body_head(), "busy");
  EXPECT_EQ(p.retry_after(), "30");
  EXPECT_TRUE(p.delivery_abort());
  EXPECT_TRUE(p.keep_alive());

  p.reset();
  EXPECT_EQ(p.state(), State::kHead);
  EXPECT_FALSE(p.started());
  EXPECT_EQ(p.status(), 0);
  EXPECT_EQ(p.body_head(), "");
  EXPECT_EQ(p.retry_after(), "");
  EXPECT_FALSE(p.delivery_abort());

  // The second response, one byte at a time this time.
  for (const char c : std::string_view(wire).substr(first.size())) EXPECT_EQ(p.feed(std::string_view(&c, 1)), 1u);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.status(), 200);
  EXPECT_EQ(p.body_head(), "ok");
  EXPECT_EQ(p.retry_after(), "");
  EXPECT_FALSE(p.delivery_abort());
  EXPECT_TRUE(p.keep_alive());

  // A reset also clears an error, and an empty reply is told apart again.
  p.reset();
  p.feed("garbage\r\n");
  ASSERT_TRUE(p.failed());
  p.reset();
  EXPECT_EQ(p.error(), "");
  p.eof();
  EXPECT_EQ(p.error(), "Empty reply from server");
  p.reset();
  EXPECT_EQ(p.feed("HTTP/1.1 204 No Content\r\n\r\n"), 27u);
  EXPECT_TRUE(p.done());
}

TEST(HttpResponseParser, BodyHeadKeepsOnlyTheStartOfTheBody) {
  Options o;
  o.body_limit = 4;
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
  const Outcome r = parse(wire, o);
  EXPECT_EQ(r.state, State::kDone);
  EXPECT_EQ(r.body_head, "0123");
  EXPECT_EQ(r.used, wire.size());  // the rest is read, not kept

  o.body_limit = 7;  // de-chunked, across chunks
  EXPECT_EQ(parse(kChunkedHead + "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", o).body_head, "hello w");
  o.body_limit = 0;
  EXPECT_EQ(parse(wire, o).body_head, "");
  o.body_limit = 3;
  o.eof = true;
  EXPECT_EQ(parse("HTTP/1.1 200 OK\r\n\r\nuntil close", o).body_head, "unt");
  // A body larger than the limit, in full.
  const std::string big(100000, 'b');
  const Outcome large = parse("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + big);
  EXPECT_EQ(large.state, State::kDone);
  EXPECT_EQ(large.body_head, big.substr(0, kBodyLimit));
}

TEST(HttpResponseParser, HeadOver100KiBIsAnError) {
  // Exactly 100 KiB of head, status line and final empty line included, is accepted.
  const std::string start = "HTTP/1.1 200 OK\r\nX-Pad: ";
  const std::string end = "\r\nContent-Length: 2\r\n\r\n";
  const std::string pad(k100KiB - start.size() - end.size(), 'p');
  const Outcome fits = parse(start + pad + end + "ok");
  EXPECT_EQ(fits.state, State::kDone);
  EXPECT_EQ(fits.body_head, "ok");

  const Outcome over = parse(start + pad + "p" + end + "ok");
  EXPECT_EQ(over.state, State::kError);
  EXPECT_EQ(over.error, "the server's response header is larger than 100 KiB");
  EXPECT_EQ(over.status, 200);

  // A line that never ends fails as soon as it passes the limit.
  const Outcome endless = parse("HTTP/1.1 200 OK\r\nX: " + std::string(k100KiB, 'x'));
  EXPECT_EQ(endless.state, State::kError);

  // The limit is for each response's head: an interim response does not use it up.
  EXPECT_EQ(parse("HTTP/1.1 100 Continue\r\n\r\n" + start + pad + end + "ok").state, State::kDone);
}

TEST(HttpResponseParser, EveryThreeWaySplitOfAComplexResponse) {
  const std::string response =
      "HTTP/1.1 100 Continue\r\nRetry-After: 1\r\n\r\n"
      "HTTP/1.1 429 Too Many Requests\nRetry-After: 60\r\nWebhook-Delivery: abort\r\n"
      "Transfer-Encoding: chunked\r\n\r\n"
      "4;x=y\r\nslow\r\n5\r\n down\nA\r\n, please..\r\n0\r\nT: 1\r\n\r\n";
  const std::string wire = response + "HTTP/1.1";
  const Options o;
  const Outcome whole = parse(wire);
  EXPECT_EQ(whole.state, State::kDone);
  EXPECT_EQ(whole.status, 429);
  EXPECT_EQ(whole.body_head, "slow down, please..");
  EXPECT_EQ(whole.retry_after, "60");
  EXPECT_TRUE(whole.delivery_abort);
  EXPECT_TRUE(whole.keep_alive);
  EXPECT_EQ(whole.used, response.size());
  for (std::size_t i = 1; i < wire.size(); ++i) {
    for (std::size_t j = i + 1; j < wire.size(); ++j) {
      const Outcome r = run(wire, {i, j}, o);
      if (r != whole) {
        ADD_FAILURE() << "cut at " << i << " and " << j << ": " << r;
        return;
      }
    }
  }
}
