#include "http/group_queue.hpp"

#include <gtest/gtest.h>

#include <map>

using pg_outbox::http::GroupQueue;
using pg_outbox::http::Request;
using pg_outbox::http::Response;

namespace {

Request request(uint64_t tag, const std::string& group, int concurrency = 0) {
  Request r;
  r.tag = tag;
  r.group = group;
  r.concurrency = concurrency;
  return r;
}

Request limited_request(uint64_t tag, const std::string& group, int rate_limit) {
  Request r = request(tag, group, 32);
  r.rate_limit = rate_limit;
  return r;
}

Response answer(const Request& r, long status, double ms = 10, bool transport_error = false) {
  Response response;
  response.tag = r.tag;
  response.group = r.group;
  response.status = status;
  response.total_ms = ms;
  response.transport_error = transport_error;
  return response;
}

// Takes what may start now.
std::vector<Request> start_all(GroupQueue& queue) {
  std::vector<Request> started;
  while (auto r = queue.next(0)) started.push_back(std::move(*r));
  return started;
}

}  // namespace

TEST(GroupQueue, AGroupStartsWithAFewAndGrowsWhileAnsweredPromptly) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 200; ++tag) queue.push(request(tag, "fast", 32));
  std::vector<Request> started = start_all(queue);
  EXPECT_EQ(started.size(), 4u);  // a few, not 200
  EXPECT_EQ(started.front().tag, 1u);
  for (int round = 0; round < 30; ++round) {
    for (const Request& r : started) queue.finished(answer(r, 200));
    started = start_all(queue);
  }
  EXPECT_GT(queue.limit_of("fast"), 8);
  EXPECT_LE(queue.limit_of("fast"), 32);
}

TEST(GroupQueue, OverloadShrinksTheWindowAndFailuresPauseUntilResumed) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 50; ++tag) queue.push(request(tag, "busy", 32));
  std::vector<Request> started = start_all(queue);
  ASSERT_EQ(started.size(), 4u);
  for (const Request& r : started) queue.finished(answer(r, 503));
  EXPECT_EQ(queue.limit_of("busy"), 2);
  EXPECT_FALSE(queue.next(0));  // paused: four failures not yet seen by the worker
  for (int i = 0; i < 3; ++i) queue.resume("busy");
  EXPECT_FALSE(queue.next(0));  // one still unseen
  queue.resume("busy");
  EXPECT_EQ(start_all(queue).size(), 2u);
}

TEST(GroupQueue, GroupsTakeTurnsAndASlowOneKeepsItsFewConnections) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 500; ++tag) queue.push(request(tag, "slow", 32));
  for (uint64_t tag = 1001; tag <= 1004; ++tag) queue.push(request(tag, "healthy", 32));
  std::vector<Request> started = start_all(queue);
  std::map<std::string, int> by_group;
  for (const Request& r : started) by_group[r.group]++;
  EXPECT_EQ(by_group["slow"], 4);  // 500 waiting, still only its window
  EXPECT_EQ(by_group["healthy"], 4);
  EXPECT_EQ(started[0].group, "slow");  // in turn: slow, healthy, slow, healthy...
  EXPECT_EQ(started[1].group, "healthy");
  // Slow 2xx answers hold the window where it is.
  for (int round = 0; round < 20; ++round) {
    for (const Request& r : started)
      if (r.group == "slow") queue.finished(answer(r, 200, 4000));
    started = start_all(queue);
  }
  EXPECT_EQ(queue.limit_of("slow"), 4);
}

TEST(GroupQueue, TheCapIsTheRequestsConcurrency) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 10; ++tag) queue.push(request(tag, "small", 2));
  EXPECT_EQ(start_all(queue).size(), 2u);
  EXPECT_EQ(queue.in_flight_of("small"), 2);
}

TEST(GroupQueue, RemovesOnlyWhatWaitsAndClearKeepsTheWindows) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 10; ++tag) queue.push(request(tag, "a", 32));
  std::vector<Request> started = start_all(queue);
  std::vector<uint64_t> removed = queue.remove_if([](uint64_t tag) { return tag % 2 == 0; });
  EXPECT_EQ(removed, (std::vector<uint64_t>{6, 8, 10}));  // 2 and 4 have started
  EXPECT_EQ(queue.waiting(), 3u);
  for (const Request& r : started) queue.finished(answer(r, 0, 5000, true));
  const int shrunk = queue.limit_of("a");
  queue.clear();
  EXPECT_EQ(queue.waiting(), 0u);
  EXPECT_EQ(queue.in_flight_of("a"), 0);
  EXPECT_EQ(queue.limit_of("a"), shrunk);
  queue.push(request(100, "a", 32));
  EXPECT_TRUE(queue.next(0));  // no pause survives clear()
}

TEST(GroupQueue, ATrickleDoesNotGrowTheWindow) {
  GroupQueue queue;
  // One request at a time, answered promptly, a thousand times: the window never had
  // to be full, so it proves nothing about a burst and stays where it began.
  for (uint64_t tag = 1; tag <= 1000; ++tag) {
    queue.push(request(tag, "trickle", 32));
    std::vector<Request> started = start_all(queue);
    ASSERT_EQ(started.size(), 1u);
    queue.finished(answer(started[0], 200));
  }
  EXPECT_EQ(queue.limit_of("trickle"), 4);
}

TEST(GroupQueue, ARateLimitSpacesStartsEvenly) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 300; ++tag) queue.push(limited_request(tag, "limited", 100));
  // Every 1 ms over 3 s, start what may start and answer it at once: 100 per second
  // (2% under), never more than 100 in any second, though the ticks are late.
  std::vector<int64_t> starts;
  for (int64_t now_us = 1; now_us <= 3000000; now_us += 1000) {
    while (auto started = queue.next(now_us)) {
      starts.push_back(now_us);
      queue.finished(answer(*started, 200));
    }
    if (queue.next_start_us() >= 0) {
      EXPECT_GE(queue.next_start_us(), now_us - 1000);
    }
  }
  ASSERT_GE(starts.size(), 290u);
  ASSERT_LE(starts.size(), 300u);
  for (size_t i = 1; i < starts.size(); ++i) EXPECT_GE(starts[i] - starts[i - 1], 9000);  // no burst
  for (size_t i = 100; i < starts.size(); ++i) EXPECT_GE(starts[i] - starts[i - 100], 1000000);
}

TEST(GroupQueue, ARateLimitedGroupDoesNotHoldBackOthers) {
  GroupQueue queue;
  for (uint64_t tag = 1; tag <= 10; ++tag) queue.push(limited_request(tag, "limited", 1));
  for (uint64_t tag = 100; tag <= 103; ++tag) queue.push(request(tag, "free", 32));
  std::map<std::string, int> by_group;
  while (auto r = queue.next(5)) by_group[r->group]++;
  EXPECT_EQ(by_group["limited"], 1);  // one now, the next a second later
  EXPECT_EQ(by_group["free"], 4);
  EXPECT_EQ(queue.next_start_us(), 5 + 1020000);
}
