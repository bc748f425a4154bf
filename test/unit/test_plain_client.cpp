// The plain HTTP/1.1 client (http/plain_client.hpp), through Client, against a scripted
// server on loopback: each request it reads gets the bytes its script says, then the
// connection is kept, closed, or closed without an answer. What a receiver sees (one
// connection for many requests, the head libcurl would send) and what the worker gets back
// (status, body head, Retry-After, transport errors with libcurl's wording) are checked,
// along with what only a keep-alive client meets: a connection the server closed while it
// was idle, or as the next request went out.
#include "http/http_client.hpp"

#include "loopback_server.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pg_outbox::http {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Reply {
  std::string bytes;           // written as is
  bool close_after = false;    // close the connection once written
  bool close_instead = false;  // close without writing anything
};

// Script: (connection number, request number on that connection, the request) -> Reply.
using Script = std::function<Reply(int connection, int request, const std::string& text)>;

class ScriptedServer {
 public:
  explicit ScriptedServer(Script script) : script_(std::move(script)) {
    listen_fd_ = loopback::listening_socket(port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ScriptedServer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (int fd : open_) shutdown(fd, SHUT_RDWR);
    }
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    for (auto& t : handlers_) t.join();
    close(listen_fd_);
  }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int connections() const { return connections_.load(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  void accept_loop() {
    for (int n = 0;; ++n) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        close(fd);
        return;
      }
      connections_++;
      open_.push_back(fd);
      handlers_.emplace_back([this, fd, n] { serve(fd, n); });
    }
  }
  void serve(int fd, int connection) {
    std::string buffer;
    std::string text;
    for (int request = 0; loopback::read_request(fd, buffer, text); ++request) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.push_back(text);
      }
      const Reply reply = script_(connection, request, text);
      if (!reply.close_instead && send(fd, reply.bytes.data(), reply.bytes.size(), MSG_NOSIGNAL) < 0) return;
      if (reply.close_after || reply.close_instead) {
        shutdown(fd, SHUT_RDWR);
        return;
      }
    }
  }

  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::mutex mutex_;
  bool stopping_ = false;
  std::vector<int> open_;
  std::vector<std::string> requests_;
  std::vector<std::thread> handlers_;
  std::thread acceptor_;
};

const char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

Request post(const std::string& url, uint64_t tag, long timeout_ms = 5000) {
  Request r;
  r.tag = tag;
  r.group = "g";
  r.url = url;
  r.headers = {"Content-Type: application/json", "webhook-id: w" + std::to_string(tag), "Expect:"};
  r.body = "{\"n\":" + std::to_string(tag) + "}";
  r.timeout_ms = timeout_ms;
  return r;
}

// Runs the client until n responses came back or 10 s passed.
std::vector<Response> run_until(Client& client, size_t n) {
  std::vector<Response> got;
  const auto deadline = Clock::now() + 10s;
  while (got.size() < n && Clock::now() < deadline)
    for (Response& r : client.run(50)) got.push_back(std::move(r));
  return got;
}

// One request at a time, each run to its end.
Response one(Client& client, Request request) {
  client.submit(std::move(request));
  auto got = run_until(client, 1);
  EXPECT_EQ(got.size(), 1u);
  return got.empty() ? Response{} : got.front();
}

TEST(PlainClient, ManyRequestsShareOneKeepAliveConnection) {
  ScriptedServer server([](int, int, const std::string&) { return Reply{kOk}; });
  Client client(4);
  for (uint64_t i = 1; i <= 20; ++i) {
    const Response r = one(client, post(server.url("/a?x=1"), i));
    EXPECT_FALSE(r.transport_error) << r.error;
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body_head, "ok");
    EXPECT_EQ(r.tag, i);
  }
  EXPECT_EQ(server.connections(), 1);
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 20u);
  const std::string host = server.url("").substr(7);
  EXPECT_EQ(seen[0], "POST /a?x=1 HTTP/1.1\r\nHost: " + host +
                         "\r\nAccept: */*\r\nContent-Type: application/json\r\nwebhook-id: w1\r\n"
                         "Content-Length: 7\r\n\r\n{\"n\":1}");
}

TEST(PlainClient, ConcurrentRequestsEachComeBackOnce) {
  ScriptedServer server([](int, int, const std::string&) { return Reply{kOk}; });
  Client client(8);
  for (uint64_t i = 1; i <= 200; ++i) client.submit(post(server.url(), i));
  const auto got = run_until(client, 200);
  ASSERT_EQ(got.size(), 200u);
  std::vector<bool> seen(201, false);
  for (const Response& r : got) {
    EXPECT_FALSE(r.transport_error) << r.error;
    ASSERT_LE(r.tag, 200u);
    EXPECT_FALSE(seen[r.tag]) << "twice: " << r.tag;
    seen[r.tag] = true;
  }
  EXPECT_LE(server.connections(), 8);
  EXPECT_EQ(client.in_flight(), 0u);
}

TEST(PlainClient, StatusBodyRetryAfterAndAbortOfTheFinalResponse) {
  ScriptedServer server([](int, int, const std::string&) {
    return Reply{
        "HTTP/1.1 100 Continue\r\nRetry-After: 1\r\n\r\n"
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After:  120 \r\nWebhook-Delivery: ABORT\r\n"
        "Transfer-Encoding: chunked\r\n\r\n4\r\nbusy\r\n3;x=y\r\n!!!\r\n0\r\nTrailer: t\r\n\r\n"};
  });
  Client client(1);
  const Response r = one(client, post(server.url(), 1));
  EXPECT_FALSE(r.transport_error) << r.error;
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body_head, "busy!!!");
  EXPECT_EQ(r.retry_after, "120");
  EXPECT_TRUE(r.delivery_abort);
  // The chunked answer ended cleanly: the connection is reused.
  EXPECT_FALSE(one(client, post(server.url(), 2)).transport_error);
  EXPECT_EQ(server.connections(), 1);
}

TEST(PlainClient, ABodyEndedByTheCloseAndConnectionCloseAreNotReused) {
  ScriptedServer server([](int, int request, const std::string&) {
    if (request > 0) return Reply{"", false, true};  // never reached: the client must not reuse
    return Reply{"HTTP/1.1 200 OK\r\n\r\nuntil close", true};
  });
  Client client(1);
  Response r = one(client, post(server.url(), 1));
  EXPECT_FALSE(r.transport_error) << r.error;
  EXPECT_EQ(r.body_head, "until close");
  r = one(client, post(server.url(), 2));
  EXPECT_FALSE(r.transport_error) << r.error;
  EXPECT_EQ(server.connections(), 2);
}

TEST(PlainClient, AnIdleConnectionTheServerClosedIsNotUsed) {
  ScriptedServer server([](int, int, const std::string&) {
    // Keep-alive as far as the headers say, then closed: the client sees it while idle.
    return Reply{kOk, true};
  });
  Client client(1);
  for (uint64_t i = 1; i <= 5; ++i) {
    // Time for the close to arrive before the next request (the client looks at its idle
    // connections before sending on one).
    std::this_thread::sleep_for(20ms);
    const Response r = one(client, post(server.url(), i));
    EXPECT_FALSE(r.transport_error) << i << ": " << r.error;
  }
  EXPECT_EQ(server.connections(), 5);
  EXPECT_EQ(server.requests().size(), 5u);  // no request was lost on a closed connection
}

TEST(PlainClient, AReusedConnectionClosedAsTheRequestWentOutIsRetriedOnceOnAFreshOne) {
  // The second request on the first connection is read, then the connection is closed
  // without an answer: the client cannot tell this from a connection the server timed out
  // as the request was going out, and sends it again on a new connection (as libcurl does).
  ScriptedServer server([](int connection, int request, const std::string&) {
    if (connection == 0 && request == 1) return Reply{"", false, true};
    return Reply{kOk};
  });
  Client client(1);
  EXPECT_FALSE(one(client, post(server.url(), 1)).transport_error);
  const Response r = one(client, post(server.url(), 2));
  EXPECT_FALSE(r.transport_error) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(PlainClient, AFreshConnectionClosedWithoutAnswerIsAnEmptyReply) {
  ScriptedServer server([](int, int, const std::string&) { return Reply{"", false, true}; });
  Client client(1);
  const Response r = one(client, post(server.url(), 1));
  EXPECT_TRUE(r.transport_error);
  EXPECT_EQ(r.error, "Empty reply from server");
  EXPECT_EQ(server.requests().size(), 1u);  // not retried: the connection was new
}

TEST(PlainClient, AResponseCutShortIsATransportErrorWithItsStatus) {
  ScriptedServer server([](int, int, const std::string&) {
    return Reply{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true};
  });
  Client client(1);
  const Response r = one(client, post(server.url(), 1));
  EXPECT_TRUE(r.transport_error);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.error.empty());
}

TEST(PlainClient, NoAnswerTimesOutWithLibcurlsWording) {
  ScriptedServer server([](int, int, const std::string&) {
    std::this_thread::sleep_for(600ms);
    return Reply{kOk};
  });
  Client client(1);
  const auto started = Clock::now();
  const Response r = one(client, post(server.url(), 1, 200));
  const auto took = Clock::now() - started;
  EXPECT_TRUE(r.transport_error);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("Operation timed out after "), std::string::npos) << r.error;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 550ms);
  EXPECT_EQ(client.in_flight(), 0u);
}

TEST(PlainClient, ARefusedConnectionSaysSo) {
  const int port = loopback::unused_port();
  Client client(1);
  const Response r = one(client, post("http://127.0.0.1:" + std::to_string(port) + "/", 1));
  EXPECT_TRUE(r.transport_error);
  EXPECT_EQ(r.error.rfind("Failed to connect to 127.0.0.1 port " + std::to_string(port) + " after ", 0), 0u) << r.error;
  EXPECT_NE(r.error.find("Connection refused"), std::string::npos) << r.error;
}

TEST(PlainClient, TheEgressPolicyRefusesBeforeConnecting) {
  ScriptedServer server([](int, int, const std::string&) { return Reply{kOk}; });
  Client client(1);
  core::EgressPolicy policy;
  ASSERT_EQ(core::parse_egress_rules("127.0.0.0/8", policy.deny), std::nullopt);
  client.set_egress_policy(policy);
  const Response r = one(client, post(server.url(), 1));
  EXPECT_TRUE(r.transport_error);
  EXPECT_EQ(r.egress_denied, "127.0.0.0/8");
  EXPECT_EQ(r.error, "the egress policy refused host \"127.0.0.1\" (rule \"127.0.0.0/8\")");
  EXPECT_EQ(server.connections(), 0);
  // A connection opened under no policy is not reused past a stricter one.
  client.set_egress_policy(core::EgressPolicy{});
  EXPECT_FALSE(one(client, post(server.url(), 2)).transport_error);
  client.set_egress_policy(policy);
  EXPECT_EQ(one(client, post(server.url(), 3)).egress_denied, "127.0.0.0/8");
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(PlainClient, AbandonAllDropsWhatIsInFlight) {
  ScriptedServer server([](int, int, const std::string&) {
    std::this_thread::sleep_for(300ms);
    return Reply{kOk};
  });
  Client client(2);
  client.submit(post(server.url(), 1));
  client.submit(post(server.url(), 2));
  EXPECT_TRUE(client.run(20).empty());
  EXPECT_EQ(client.in_flight(), 2u);
  client.abandon_all();
  EXPECT_EQ(client.in_flight(), 0u);
  std::this_thread::sleep_for(350ms);
  EXPECT_TRUE(client.run(50).empty());
}

}  // namespace
}  // namespace pg_outbox::http
