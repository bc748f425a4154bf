// libcurl multi-interface client; see http_client.hpp for the contract.
//
// Shape: requests wait in a FIFO queue until a slot is free (in flight < max_concurrency); a
// started request lives in a Transfer, which owns an easy handle, its header list, its error
// buffer and the Response being filled. Finished Transfers go back to an idle pool and their
// easy handles are reused (options that never change are set once, when the handle is
// created); connections live in the multi handle's connection cache, so they are kept alive and
// reused across requests no matter which easy handle runs the next transfer.
//
// Event loop: libcurl is driven with curl_multi_socket_action. It tells us which sockets to
// watch (CURLMOPT_SOCKETFUNCTION), and we keep them in an epoll instance owned by the client;
// it tells us when it next needs to run for timeouts (CURLMOPT_TIMERFUNCTION), and we keep that
// deadline. A wait is then one epoll_wait that returns only the ready sockets, instead of a
// poll() over every socket in flight; finished transfers are read with curl_multi_info_read.
#include "http/http_client.hpp"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {
namespace {

// Retry-After values are short (seconds or an HTTP date); anything longer is junk, and keeping
// a bounded prefix is enough for the caller to reject it.
constexpr std::size_t kRetryAfterLimit = 128;
// Connecting never gets more than this, even when the whole-transfer timeout is longer.
constexpr long kMaxConnectTimeoutMs = 10'000;
constexpr const char* kAllowedProtocols = "http,https";

struct EasyDeleter {
    void operator()(CURL* easy) const noexcept { curl_easy_cleanup(easy); }
};
struct MultiDeleter {
    void operator()(CURLM* multi) const noexcept { curl_multi_cleanup(multi); }
};
struct SlistDeleter {
    void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;
using MultiPtr = std::unique_ptr<CURLM, MultiDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

// curl_global_init is not thread-safe and must run once per process before any other call.
// It is never undone: the worker process owns libcurl until it exits.
void init_curl_once() {
    static std::once_flag once;
    static CURLcode result = CURLE_OK;
    std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (result != CURLE_OK)
        throw std::runtime_error(std::string("curl_global_init failed: ") +
                                 curl_easy_strerror(result));
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
        if (x != y) return false;
    }
    return true;
}

std::string_view trim(std::string_view s) {
    constexpr std::string_view kSpace = " \t\r\n";
    const auto first = s.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return {};
    const auto last = s.find_last_not_of(kSpace);
    return s.substr(first, last - first + 1);
}

bool has_header(const std::vector<std::string>& headers, std::string_view name) {
    for (const auto& line : headers) {
        const auto colon = line.find(':');
        if (colon != std::string::npos &&
            iequals(trim(std::string_view(line).substr(0, colon)), name))
            return true;
    }
    return false;
}

}  // namespace

// One request from start to finish. Heap-allocated and never moved while in flight: libcurl
// holds pointers to error_buffer, to request.body (POSTFIELDS) and to the Transfer itself
// (callback user data).
struct Transfer {
    Request request;
    Response response;
    SlistPtr header_list;
    char error_buffer[CURL_ERROR_SIZE] = {};
    EasyPtr easy;  // declared last: destroyed first, while what it points at still exists

    // CURLOPT_WRITEFUNCTION: keep the first kBodyHeadLimit bytes, accept (and drop) the rest.
    static size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
        auto* self = static_cast<Transfer*>(user);
        const size_t n = size * nmemb;
        std::string& head = self->response.body_head;
        if (head.size() < kBodyHeadLimit)
            head.append(data, std::min(n, kBodyHeadLimit - head.size()));
        return n;
    }

    // CURLOPT_HEADERFUNCTION: called once per header line, status lines included. A status line
    // starts a new response (after a 1xx interim one), so only the final response's Retry-After
    // is kept.
    static size_t on_header(char* data, size_t size, size_t nitems, void* user) {
        auto* self = static_cast<Transfer*>(user);
        const size_t n = size * nitems;
        const std::string_view line(data, n);
        if (line.substr(0, 5) == "HTTP/") {
            self->response.retry_after.clear();
            return n;
        }
        const auto colon = line.find(':');
        if (colon != std::string_view::npos && iequals(line.substr(0, colon), "Retry-After")) {
            const auto value = trim(line.substr(colon + 1));
            self->response.retry_after.assign(value.substr(0, kRetryAfterLimit));
        }
        return n;
    }

    // Sets every option from scratch: the handle may have run another request before.
    CURLcode configure() {
        CURL* e = easy.get();
        curl_easy_reset(e);
        error_buffer[0] = '\0';

        // Our own header lines, plus "Expect:" so that libcurl does not wait for a
        // "100 Continue" before sending bodies over 1 KiB (a round trip, or a 1 s stall against
        // receivers that ignore Expect).
        header_list.reset();
        curl_slist* list = nullptr;
        auto append = [&list](const char* line) {
            curl_slist* grown = curl_slist_append(list, line);
            if (!grown) return false;
            list = grown;
            return true;
        };
        for (const auto& line : request.headers) {
            if (!append(line.c_str())) {
                curl_slist_free_all(list);
                return CURLE_OUT_OF_MEMORY;
            }
        }
        if (!has_header(request.headers, "Expect") && !append("Expect:")) {
            curl_slist_free_all(list);
            return CURLE_OUT_OF_MEMORY;
        }
        header_list.reset(list);

        const long timeout_ms = std::max(1L, request.timeout_ms);
        CURLcode rc = CURLE_OK;
        auto check = [&rc](CURLcode c) {
            if (rc == CURLE_OK) rc = c;
        };
        check(curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error_buffer));
        check(curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L));
        check(curl_easy_setopt(e, CURLOPT_URL, request.url.c_str()));
        check(curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, kAllowedProtocols));
        check(curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, kAllowedProtocols));
        check(curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L));
        check(curl_easy_setopt(e, CURLOPT_MAXREDIRS, 0L));
        // An empty proxy and a "*" no-proxy list: http_proxy & co. in the server's environment
        // must not reroute webhooks.
        check(curl_easy_setopt(e, CURLOPT_PROXY, ""));
        check(curl_easy_setopt(e, CURLOPT_NOPROXY, "*"));
        check(curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1)));
        check(curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L));
        check(curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L));
        check(curl_easy_setopt(e, CURLOPT_POST, 1L));
        check(curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                               static_cast<curl_off_t>(request.body.size())));
        check(curl_easy_setopt(e, CURLOPT_POSTFIELDS, request.body.data()));
        check(curl_easy_setopt(e, CURLOPT_HTTPHEADER, header_list.get()));
        check(curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms));
        check(curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                               std::min(timeout_ms, kMaxConnectTimeoutMs)));
        check(curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_body));
        check(curl_easy_setopt(e, CURLOPT_WRITEDATA, this));
        check(curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header));
        check(curl_easy_setopt(e, CURLOPT_HEADERDATA, this));
        return rc;
    }

    // Fills in what libcurl knows once the transfer is over.
    void finish(CURLcode result) {
        long status = 0;
        if (curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &status) == CURLE_OK)
            response.status = status;
        curl_off_t total_us = 0;
        if (curl_easy_getinfo(easy.get(), CURLINFO_TOTAL_TIME_T, &total_us) == CURLE_OK)
            response.total_ms = static_cast<double>(total_us) / 1000.0;
        if (result != CURLE_OK) fail(result);
    }

    void fail(CURLcode result) {
        response.transport_error = true;
        response.error =
            error_buffer[0] != '\0' ? std::string(error_buffer) : curl_easy_strerror(result);
    }

    // Back to the idle pool: release what belonged to the request, keep the easy handle.
    void clear() {
        request = Request{};
        response = Response{};
        header_list.reset();
    }
};

struct Client::Impl {
    MultiPtr multi;
    size_t max_concurrency = 1;
    std::deque<Request> waiting;                                  // submitted, not started
    std::unordered_map<CURL*, std::unique_ptr<Transfer>> active;  // added to the multi handle
    std::vector<std::unique_ptr<Transfer>> idle;                  // finished, handle reusable
    std::vector<Response> ready;  // finished, not returned yet (run() threw after collecting)

    void apply_limits() {
        const long n = static_cast<long>(max_concurrency);
        CURLM* m = multi.get();
        // HTTP/1.1 only: one request per connection at a time, so at most n connections are
        // busy; the cache keeps up to n idle ones for reuse, and opening a connection beyond the
        // total closes the oldest idle one (e.g. to an endpoint that is no longer used).
        if (curl_multi_setopt(m, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_NOTHING)) !=
                CURLM_OK ||
            curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, n) != CURLM_OK ||
            curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, n) != CURLM_OK ||
            curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, n) != CURLM_OK)
            throw std::runtime_error("curl_multi_setopt failed");
    }

    std::unique_ptr<Transfer> take_transfer() {
        if (!idle.empty()) {
            auto t = std::move(idle.back());
            idle.pop_back();
            return t;
        }
        auto t = std::make_unique<Transfer>();
        t->easy.reset(curl_easy_init());
        if (!t->easy) return nullptr;
        return t;
    }

    void recycle(std::unique_ptr<Transfer> t) {
        t->clear();
        if (idle.size() < max_concurrency) idle.push_back(std::move(t));
    }

    static Response failed(uint64_t tag, std::string error) {
        Response r;
        r.tag = tag;
        r.transport_error = true;
        r.error = std::move(error);
        return r;
    }

    // Starts queued requests while slots are free. A request that cannot even be started
    // (out of memory) completes at once as a transport error. Returns how many were started.
    size_t start_waiting(std::vector<Response>& out) {
        size_t started = 0;
        while (!waiting.empty() && active.size() < max_concurrency) {
            Request request = std::move(waiting.front());
            waiting.pop_front();
            auto t = take_transfer();
            if (!t) {
                out.push_back(failed(request.tag, "curl_easy_init failed"));
                continue;
            }
            t->request = std::move(request);
            t->response.tag = t->request.tag;
            const CURLcode rc = t->configure();
            if (rc != CURLE_OK) {
                t->fail(rc);
                out.push_back(std::move(t->response));
                recycle(std::move(t));
                continue;
            }
            const CURLMcode mrc = curl_multi_add_handle(multi.get(), t->easy.get());
            if (mrc != CURLM_OK) {
                out.push_back(failed(t->request.tag, curl_multi_strerror(mrc)));
                recycle(std::move(t));
                continue;
            }
            CURL* key = t->easy.get();
            active.emplace(key, std::move(t));
            ++started;
        }
        return started;
    }

    void perform() {
        int running = 0;
        const CURLMcode mrc = curl_multi_perform(multi.get(), &running);
        if (mrc != CURLM_OK)
            throw std::runtime_error(std::string("curl_multi_perform failed: ") +
                                     curl_multi_strerror(mrc));
    }

    // Moves every finished transfer's Response to out and its Transfer to the idle pool.
    void collect(std::vector<Response>& out) {
        int left = 0;
        while (CURLMsg* msg = curl_multi_info_read(multi.get(), &left)) {
            if (msg->msg != CURLMSG_DONE) continue;
            CURL* easy = msg->easy_handle;
            const CURLcode result = msg->data.result;  // msg is invalid after remove_handle
            auto it = active.find(easy);
            if (it == active.end()) continue;  // not ours; cannot happen
            std::unique_ptr<Transfer> t = std::move(it->second);
            active.erase(it);
            curl_multi_remove_handle(multi.get(), easy);
            t->finish(result);
            out.push_back(std::move(t->response));
            recycle(std::move(t));
        }
    }

    void remove_all_active() {
        for (auto& entry : active) curl_multi_remove_handle(multi.get(), entry.first);
        active.clear();  // frees the easy handles, closing their connections
    }
};

Client::Client(int max_concurrency) : impl_(std::make_unique<Impl>()) {
    init_curl_once();
    impl_->multi.reset(curl_multi_init());
    if (!impl_->multi) throw std::runtime_error("curl_multi_init failed");
    impl_->max_concurrency = static_cast<size_t>(std::max(1, max_concurrency));
    impl_->apply_limits();
}

Client::~Client() {
    impl_->remove_all_active();
    impl_->idle.clear();
    impl_->multi.reset();  // closes the cached connections
}

void Client::set_max_concurrency(int max_concurrency) {
    impl_->max_concurrency = static_cast<size_t>(std::max(1, max_concurrency));
    impl_->apply_limits();
    if (impl_->idle.size() > impl_->max_concurrency) impl_->idle.resize(impl_->max_concurrency);
}

void Client::submit(Request request) { impl_->waiting.push_back(std::move(request)); }

std::vector<uint64_t> Client::cancel_queued(const std::function<bool(uint64_t tag)>& select) {
    std::vector<uint64_t> cancelled;
    auto& waiting = impl_->waiting;
    auto keep = std::remove_if(waiting.begin(), waiting.end(), [&](const Request& request) {
        if (!select(request.tag)) return false;
        cancelled.push_back(request.tag);
        return true;
    });
    waiting.erase(keep, waiting.end());
    return cancelled;
}

size_t Client::in_flight() const { return impl_->active.size(); }

size_t Client::queued() const { return impl_->waiting.size(); }

std::vector<Response> Client::run(int timeout_ms) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));

    std::vector<Response> out = std::move(impl_->ready);
    impl_->ready.clear();
    impl_->start_waiting(out);

    try {
        for (;;) {
            impl_->perform();
            impl_->collect(out);
            if (!out.empty()) {
                // Slots were freed: start the next requests now rather than on the next call.
                if (impl_->start_waiting(out) > 0) {
                    impl_->perform();
                    impl_->collect(out);
                }
                break;
            }
            if (impl_->active.empty()) break;  // nothing that could complete
            const auto remaining =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count();
            if (remaining <= 0) break;
            int fds = 0;
            const CURLMcode mrc =
                curl_multi_poll(impl_->multi.get(), nullptr, 0,
                                static_cast<int>(std::min<long long>(remaining, INT_MAX)), &fds);
            if (mrc != CURLM_OK)
                throw std::runtime_error(std::string("curl_multi_poll failed: ") +
                                         curl_multi_strerror(mrc));
        }
    } catch (...) {
        // Responses already taken out of libcurl are returned by the next call, not lost.
        impl_->ready = std::move(out);
        throw;
    }
    return out;
}

void Client::abandon_all() {
    impl_->remove_all_active();
    impl_->waiting.clear();
    impl_->ready.clear();
}

}  // namespace pg_outbox::http
