// One request on one libcurl easy handle, from start to finish: the handle's options, the
// request's header list, and the Response filled in as the transfer runs and ends. A
// finished Transfer is kept for the next request, easy handle included (options that
// never change are set once, when the handle is created).
#pragma once

#include "core/egress_policy.hpp"
#include "http/egress_check.hpp"
#include "http/http_client.hpp"

#include <curl/curl.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace pg_outbox::http {

class SocketWatch;

struct EasyDeleter {
  void operator()(CURL* easy) const noexcept { curl_easy_cleanup(easy); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;

// Heap-allocated and never moved while in flight: libcurl holds pointers to error_buffer, to
// request.body (POSTFIELDS), to the header lines (the header list points into
// request.headers), to the response (the write and header callbacks' user data) and to the
// Transfer itself (CURLOPT_PRIVATE and the connection callbacks' user data).
struct Transfer {
  Request request;
  Response response;
  // CURLOPT_HTTPHEADER list, built in place: each node points at a line of request.headers,
  // so starting a request allocates nothing for its headers (curl_slist_append would copy
  // every line). Capacity is kept across requests.
  std::vector<curl_slist> header_nodes;
  char error_buffer[CURL_ERROR_SIZE] = {};
  std::size_t slot = 0;  // the client's index of it while in flight
  EgressCheck egress;
  SocketWatch* sockets = nullptr;  // opens and closes its connections' sockets
  EasyPtr easy;                    // declared last: destroyed first, while what it points at still exists

  // A Transfer with a new easy handle and the options that are the same for every request;
  // nullptr if libcurl cannot make one. Both pointers must outlive it.
  static std::unique_ptr<Transfer> create(SocketWatch* sockets, const core::EgressPolicy* egress_policy);

  // Sets the options of this request (all of them: the handle may have run another one
  // before, and is never curl_easy_reset).
  CURLcode configure();

  // Fills in what libcurl knows once the transfer is over.
  void finish(CURLcode result);

  // Marks the response as a transport error, with libcurl's text for result.
  void fail(CURLcode result);

  // Back to the idle pool: release what belonged to the request, keep the easy handle (and
  // the header nodes' capacity). libcurl keeps pointers into the old request (URL excepted,
  // it copies that) until configure() replaces them, but never uses them outside a transfer.
  void clear();
};

}  // namespace pg_outbox::http
