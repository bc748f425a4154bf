// The plain HTTP/1.1 client: webhook POSTs to http:// URLs whose host is an IP literal
// (core/plain_http_url.hpp), on keep-alive connections of its own, without libcurl.
//
// Why it exists: on a busy endpoint the delivery thread's cost is per request, and libcurl's
// share of it (its state machine, and a liveness poll() of the connection before reusing
// it) was as large as the kernel's. This client does one write and, usually, one read per
// request; an idle connection stays in epoll, so a server that closes it is seen at once
// instead of polled before each reuse. Everything else (https, host names, anything the
// URL check leaves out) stays with libcurl, in the same Client, the same epoll wait and the
// same concurrency budget.
//
// It keeps libcurl's behaviour where a receiver or the worker could tell the difference:
// the same request head (core/http_request_head.hpp), the egress check before connecting
// and before reusing a connection, the whole-transfer timeout with connecting capped at
// 10 s, no redirects, no proxy, and one retry on a fresh connection when a reused one turns
// out to be closed before any byte of the response came back (the server closed it as the
// request was going out, which a keep-alive client cannot rule out).
#pragma once

#include "core/egress_policy.hpp"
#include "core/plain_http_url.hpp"
#include "http/http_client.hpp"
#include "http/socket_watch.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace pg_outbox::http {

class PlainClient : public SocketWatch::Listener {
 public:
  using Clock = std::chrono::steady_clock;

  // Both must outlive the client; the policy is replaced only between Client::run() calls.
  PlainClient(SocketWatch& watch, const core::EgressPolicy* egress);
  ~PlainClient();
  PlainClient(const PlainClient&) = delete;
  PlainClient& operator=(const PlainClient&) = delete;

  // Most connections kept, busy and idle together (the Client's max_concurrency).
  void set_max_connections(std::size_t n);

  // Starts request (its Response's tag, group and started_ms already set) to target. A
  // request that fails before anything is sent completes at once (take_finished()).
  void start(Request request, Response response, const core::PlainHttpTarget& target);

  std::size_t in_flight() const { return busy_.size(); }
  std::size_t idle() const { return idle_.size(); }

  // SocketWatch::Listener: one of our sockets is ready.
  void on_ready(int fd, uint32_t events) override;

  // Ends the requests whose time is up, as libcurl would (a transport error).
  void expire(Clock::time_point now);
  // When the next request's time is up; nullopt with nothing in flight.
  std::optional<Clock::time_point> next_deadline() const;

  // Moves the finished requests' responses to out.
  void take_finished(std::vector<Response>& out);

  // Drops the requests in flight and closes their connections; idle ones are kept.
  void abandon_all();

 private:
  struct Exchange;
  struct Connection;

  Connection* open_connection(Exchange& x);
  // Each of these may end the exchange, and close and free the connection: send() and
  // watch() return false when they did.
  bool send(Connection& c);
  bool watch(Connection& c, uint32_t events);
  void receive(Connection& c);
  void connected(Connection& c);
  void attach(Connection& c, std::unique_ptr<Exchange> x);
  void complete(Connection& c, bool reusable);
  void fail(Connection& c, std::string error);
  // The exchange's response is final: the connection goes idle (keep_connection) or closes.
  void end(Connection& c, bool keep_connection);
  bool retry_on_fresh_connection(Connection& c);
  void finish(std::unique_ptr<Exchange> x);
  void close(Connection& c);
  void unbusy(Connection& c);
  void trim_idle(std::size_t keep);

  SocketWatch& watch_;
  const core::EgressPolicy* egress_;
  std::size_t max_connections_ = 1;
  std::vector<std::unique_ptr<Connection>> by_fd_;  // every open connection, indexed by socket
  std::vector<Connection*> busy_;                   // carrying a request; see Connection::slot
  std::vector<Connection*> idle_;                   // oldest first
  std::vector<Response> finished_;
  std::vector<char> buffer_;  // what one read takes in, shared by every connection
};

}  // namespace pg_outbox::http
