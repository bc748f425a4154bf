// The HTTP side of delivery: a client that POSTs webhook payloads, keeps up to
// max_concurrency transfers in flight and reuses keep-alive connections. Requests to plain
// http:// URLs with an IP address for host go to our own HTTP/1.1 client
// (plain_client.hpp), every other one to libcurl's multi interface.
//
// Pure C++: no PostgreSQL header here or in the .cpp (see docs/architecture.md, The C++/PostgreSQL boundary). libcurl
// itself is hidden behind a pimpl, so the worker (pg/) can include this header after postgres.h without pulling curl.h
// in.
//
// Threading and blocking: a Client is used by one thread at a time (the delivery thread, see
// delivery_thread.hpp) and never blocks longer than the timeout passed to run(), which a
// wake fd can cut short. libcurl is told never to install signal handlers (CURLOPT_NOSIGNAL).
#pragma once

#include "core/egress_policy.hpp"
#include "core/header_lines.hpp"
#include "core/signing_key.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::http {

// Bytes of the response body kept in Response::body_head; the rest is read and dropped.
// The DLQ keeps the first 1 KiB as text; 3 bytes more let a UTF-8 character that
// straddles the 1 KiB mark be seen whole (and left out), not as a cut one.
constexpr std::size_t kBodyHeadLimit = 1024 + 3;

// Connecting never gets more than this, even when the whole-transfer timeout is longer.
constexpr long kMaxConnectTimeoutMs = 10'000;

struct Request {
  uint64_t tag = 0;   // the caller's id (message id), returned in the Response
  std::string group;  // the caller's grouping (endpoint), returned in the Response
  std::string url;
  core::HeaderLines headers;  // complete "Name: value" lines, already validated
  std::string body;           // POSTed as is (any bytes)
  long timeout_ms = 0;        // whole-transfer timeout (connect included); <= 0 is taken as 1
  int concurrency = 0;        // most of its group in flight (DeliveryThread); 0: no cap of its own
  int rate_limit = 0;         // most of its group started per second (DeliveryThread); 0: none
  // When set, the headers carry webhook-timestamp (and webhook-signature) made at
  // stamped_s: the delivery thread stamps them again if the request starts later.
  struct Stamp {
    int64_t stamped_s = 0;
    std::string webhook_id;
    core::SigningKeys keys;  // the keys it was signed with (shared, immutable); none: unsigned
  };
  std::optional<Stamp> stamp;
};

struct Response {
  uint64_t tag = 0;
  std::string group;
  // HTTP status of the final response, 0 when none was received. When transport_error is set
  // the status may still be non-zero (the headers arrived, then the transfer failed): the
  // transfer did not complete, so transport_error must be checked first.
  long status = 0;
  bool transport_error = false;  // connect refused / DNS / TLS / timeout / closed connection
  std::string error;             // curl's error text, empty on success
  std::string body_head;         // first kBodyHeadLimit bytes of the response body
  std::string retry_after;       // raw value of the final response's Retry-After, empty if none
  bool delivery_abort = false;   // the final response said "webhook-delivery: abort"
  // The egress rule that refused the address the request would have gone to (then
  // transport_error is set and nothing was sent), empty otherwise.
  std::string egress_denied;
  double total_ms = 0;     // transfer time
  int64_t started_ms = 0;  // when it started (unix ms): the attempt log's attempted_at
};

class Client {
 public:
  // Throws std::runtime_error if libcurl cannot be initialised.
  explicit Client(int max_concurrency);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // GUC reload. Values < 1 are taken as 1. Lowering it never cancels transfers already in
  // flight; it only delays starting queued ones.
  void set_max_concurrency(int max_concurrency);

  // The egress policy, checked on the address of every connection before it is opened
  // (CURLOPT_OPENSOCKETFUNCTION) and of every connection a request is about to use,
  // reused ones included (CURLOPT_PREREQFUNCTION). Applies to every connection opened
  // or reused from now on. An empty policy allows everything.
  void set_egress_policy(core::EgressPolicy policy);

  // A descriptor (an eventfd) whose readability ends run()'s wait at once; run() never
  // reads it, its owner does. -1 removes it. The descriptor must outlive the client or be
  // removed first.
  void set_wake_fd(int fd);

  // Queued; started (by run()) as soon as fewer than max_concurrency are in flight.
  void submit(Request request);

  size_t in_flight() const;  // started, not finished
  size_t queued() const;     // submitted, not started

  // Starts queued requests (slots freed during this call are refilled by the next one, after
  // the caller has seen the results) and drives transfers for at most timeout_ms, waiting in epoll_wait
  // (bounded by libcurl's next timer); returns as soon as at least one response is ready
  // (possibly empty on timeout, or early when a signal or the wake fd interrupts the wait).
  // timeout_ms <= 0: just process what is ready, never wait. Returns at once when nothing is
  // in flight. Throws std::runtime_error only if the multi handle itself fails (out of memory).
  std::vector<Response> run(int timeout_ms);

  // Drops everything (used at shutdown): queued requests, transfers in flight (their handles
  // are removed and freed, their connections closed) and responses not yet returned. The
  // client stays usable; the destructor does the same and then closes idle connections.
  void abandon_all();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg_outbox::http
