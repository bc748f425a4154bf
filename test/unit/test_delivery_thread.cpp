// The delivery thread against a real HTTP receiver on loopback (a small server in this
// file, one thread per connection): every request comes back exactly once, requests not
// started can be taken back, a failed response pauses its group until resume(), nothing
// submitted before abandon_all() comes back, stop() is prompt with transfers hanging, and
// the thread runs with the process's signals blocked. Built and run under ThreadSanitizer
// too (test/run_all.sh).
#include "http/delivery_thread.hpp"

#include "loopback_server.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace pg_outbox::http {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// HTTP/1.1 with keep-alive; answers 200 to every POST, or holds the answer while held.
class Receiver {
 public:
  Receiver() {
    listen_fd_ = loopback::listening_socket(port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Receiver() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (int fd : connections_) shutdown(fd, SHUT_RDWR);
    }
    released_.notify_all();
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    for (auto& t : handlers_) t.join();
    close(listen_fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  void hold(bool held) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_ = held;
    }
    released_.notify_all();
  }
  int received() const { return received_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        close(fd);
        return;
      }
      connections_.push_back(fd);
      handlers_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    std::string buffer;
    std::string request;
    while (loopback::read_request(fd, buffer, request)) {
      received_++;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        released_.wait(lock, [this] { return !held_ || stopping_; });
        if (stopping_) return;
      }
      static const char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      if (write(fd, kOk, sizeof kOk - 1) < 0) return;
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> received_{0};
  std::mutex mutex_;
  std::condition_variable released_;
  bool held_ = false;
  bool stopping_ = false;
  std::vector<int> connections_;
  std::vector<std::thread> handlers_;
  std::thread acceptor_;
};

// A loopback port nothing listens on: connecting is refused at once.
std::string refused_url() { return "http://127.0.0.1:" + std::to_string(loopback::unused_port()) + "/"; }

std::vector<Request> requests(const std::string& url, const std::string& group, uint64_t first, int n) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i)
    out.push_back({first + static_cast<uint64_t>(i), group, url, {"Content-Type: application/json"}, "{}", 5000});
  return out;
}

// Waits on results_fd (as the worker does) and takes responses until `want` arrived or the
// deadline passed.
std::vector<Response> gather(DeliveryThread& thread, size_t want, std::chrono::milliseconds within) {
  std::vector<Response> got;
  const auto deadline = Clock::now() + within;
  while (got.size() < want && Clock::now() < deadline) {
    pollfd fd{thread.results_fd(), POLLIN, 0};
    poll(&fd, 1, 50);
    for (Response& r : thread.take_responses(1000)) got.push_back(std::move(r));
  }
  return got;
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(DeliveryThread, EveryRequestComesBackExactlyOnce) {
  Receiver receiver;
  DeliveryThread thread(8);
  for (int batch = 0; batch < 10; ++batch) thread.submit(requests(receiver.url(), "a", 1 + 100 * batch, 100));
  std::vector<Response> got = gather(thread, 1000, 20s);
  std::set<uint64_t> tags;
  for (const Response& r : got) {
    EXPECT_FALSE(r.transport_error) << r.error;
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.group, "a");
    EXPECT_EQ(r.body_head, "ok");
    tags.insert(r.tag);
  }
  EXPECT_EQ(got.size(), 1000u);
  EXPECT_EQ(tags.size(), 1000u);
  EXPECT_EQ(receiver.received(), 1000);
  EXPECT_TRUE(gather(thread, 1, 100ms).empty());  // nothing more, nothing twice
}

TEST(DeliveryThread, TakesBackOnlyWhatHasNotStarted) {
  Receiver receiver;
  receiver.hold(true);
  DeliveryThread thread(2);
  thread.submit(requests(receiver.url(), "a", 1, 10));
  ASSERT_TRUE(wait_until([&] { return receiver.received() == 2; }, 5s));
  std::vector<uint64_t> cancelled = thread.cancel_queued([](uint64_t tag) { return tag != 5; });
  EXPECT_EQ(cancelled.size(), 7u);  // 8 waited; the one tagged 5 stays
  receiver.hold(false);
  std::vector<Response> got = gather(thread, 3, 10s);
  std::set<uint64_t> tags;
  for (const Response& r : got) tags.insert(r.tag);
  EXPECT_EQ(tags, (std::set<uint64_t>{1, 2, 5}));
  for (uint64_t tag : cancelled) EXPECT_EQ(tags.count(tag), 0u);
  EXPECT_EQ(receiver.received(), 3);
}

TEST(DeliveryThread, AFailurePausesItsGroupUntilResumed) {
  Receiver receiver;
  DeliveryThread thread(4);
  thread.submit(requests(refused_url(), "down", 1, 20));
  thread.submit(requests(receiver.url(), "up", 100, 20));
  // The first requests of "down" fail at once; no more of "down" start until resume(),
  // while "up" goes on.
  std::vector<Response> got = gather(thread, 1000, 1500ms);
  size_t down = 0, up = 0;
  for (const Response& r : got) (r.group == "down" ? down : up)++;
  EXPECT_GE(down, 1u);
  EXPECT_LE(down, 4u);
  EXPECT_EQ(up, 20u);
  size_t total_down = down;
  for (int round = 0; round < 40 && total_down < 20; ++round) {
    thread.resume();
    for (const Response& r : gather(thread, 1, 1s)) {
      EXPECT_EQ(r.group, "down");
      EXPECT_TRUE(r.transport_error);
      total_down++;
    }
  }
  EXPECT_EQ(total_down, 20u);
}

TEST(DeliveryThread, AFailureNotYetTakenKeepsItsGroupPaused) {
  DeliveryThread thread(4);
  // The first four start together (nothing is paused yet) and are all refused.
  thread.submit(requests(refused_url(), "down", 1, 20));
  pollfd fd{thread.results_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&fd, 1, 5000), 1);
  std::this_thread::sleep_for(200ms);  // the other three refused connections end too
  ASSERT_EQ(thread.take_responses(1).size(), 1u);
  thread.resume();  // the worker has seen one failure; three more wait, not yet taken
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(thread.take_responses(1000).size(), 3u);  // and nothing new started meanwhile
  thread.resume();                                    // all seen: the group goes on
  EXPECT_GE(gather(thread, 1, 2s).size(), 1u);
}

TEST(DeliveryThread, NothingSubmittedBeforeAbandonComesBack) {
  Receiver receiver;
  receiver.hold(true);
  DeliveryThread thread(4);
  thread.submit(requests(receiver.url(), "a", 1, 10));
  ASSERT_TRUE(wait_until([&] { return receiver.received() == 4; }, 5s));
  thread.abandon_all();
  receiver.hold(false);
  thread.submit(requests(receiver.url(), "a", 1000, 5));
  std::vector<Response> got = gather(thread, 5, 10s);
  std::set<uint64_t> tags;
  for (const Response& r : got) tags.insert(r.tag);
  EXPECT_EQ(tags, (std::set<uint64_t>{1000, 1001, 1002, 1003, 1004}));
  EXPECT_TRUE(gather(thread, 1, 300ms).empty());
}

TEST(DeliveryThread, StopsPromptlyWithTransfersHanging) {
  Receiver receiver;
  receiver.hold(true);
  auto thread = std::make_unique<DeliveryThread>(4);
  thread->submit(requests(receiver.url(), "a", 1, 10));
  ASSERT_TRUE(wait_until([&] { return receiver.received() == 4; }, 5s));
  const auto start = Clock::now();
  thread->stop();
  EXPECT_LT(Clock::now() - start, 500ms);
  thread.reset();
}

std::set<std::string> task_ids() {
  std::set<std::string> ids;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return ids;
  while (dirent* entry = readdir(tasks))
    if (entry->d_name[0] != '.') ids.insert(entry->d_name);
  closedir(tasks);
  return ids;
}

// The blocked signals of the threads the delivery thread adds, from /proc: the process's
// handlers must run on the thread that created it, never on it.
TEST(DeliveryThread, RunsWithEverySignalBlocked) {
  const std::set<std::string> before = task_ids();
  DeliveryThread thread(1);
  int added = 0;
  for (const std::string& id : task_ids()) {
    if (before.count(id) != 0) continue;
    std::ifstream status("/proc/self/task/" + id + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      const unsigned long long blocked = std::stoull(line.substr(7), nullptr, 16);
      for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGUSR1, SIGUSR2, SIGQUIT, SIGALRM, SIGURG})
        EXPECT_TRUE(blocked & (1ULL << (sig - 1))) << "signal " << sig << " not blocked in task " << id;
      added++;
    }
  }
  EXPECT_GE(added, 1);  // ThreadSanitizer starts a thread of its own with the first one
  // The creator's own mask is untouched.
  sigset_t mine;
  pthread_sigmask(SIG_SETMASK, nullptr, &mine);
  EXPECT_FALSE(sigismember(&mine, SIGTERM));
}

}  // namespace
}  // namespace pg_outbox::http
