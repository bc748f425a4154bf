// The head of a webhook POST for the plain HTTP/1.1 client (http/plain_client.hpp), written
// the way libcurl writes it for the same request, so that a receiver sees the same request
// whichever client sent it: request line, Host, "Accept: */*", the caller's header lines,
// then Content-Type (when the caller set none) and Content-Length.
//
// The caller's lines follow libcurl's CURLOPT_HTTPHEADER conventions: "Name: value" is sent
// as is; "Name;" sends Name with an empty value; "Name:" with nothing after the colon sends
// nothing and removes a header the client would add itself (Host, Accept, Content-Type).
// A caller's Host, Accept or Content-Type replaces the client's own. "Expect" is never
// sent: the whole body always follows the head at once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/header_lines.hpp"

namespace pg_outbox::core {

// target: the request target (path and query); host: the Host header's value.
std::string http_post_head(std::string_view target, std::string_view host, const HeaderLines& lines,
                           std::size_t body_size);

}  // namespace pg_outbox::core
