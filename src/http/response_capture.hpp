// What a transfer keeps of the response libcurl receives: the head of the body, the
// final response's Retry-After, and whether it said "webhook-delivery: abort". Both are libcurl callbacks whose user
// data is the Response being filled.
#pragma once

#include <cstddef>

namespace pg_outbox::http {

// Retry-After values are short (seconds or an HTTP date); anything longer is junk, and keeping
// a bounded prefix is enough for the caller to reject it.
constexpr std::size_t kRetryAfterLimit = 128;

// CURLOPT_WRITEFUNCTION: keeps the first kBodyHeadLimit bytes in Response::body_head,
// accepts (and drops) the rest.
std::size_t capture_body(char* data, std::size_t size, std::size_t nmemb, void* response);

// CURLOPT_HEADERFUNCTION: called once per header line, status lines included. A status line
// starts a new response (after a 1xx interim one), so only the final response's Retry-After
// is kept, trimmed and cut at kRetryAfterLimit bytes, and only its "webhook-delivery: abort"
// (name and value matched without case, the value trimmed) sets Response::delivery_abort.
std::size_t capture_header(char* data, std::size_t size, std::size_t nitems, void* response);

}  // namespace pg_outbox::http
