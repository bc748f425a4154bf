// The body of a batch: several messages of one endpoint in one request (docs/delivery.md,
// Batches). A JSON array whose elements are, for Standard Webhooks,
//   {"id": <webhook-id>, "type": <event type or null>, "payload": <payload>}
// (with "headers": <the message's headers> when it has some), and for CloudEvents the
// structured events of cloudevents.hpp (application/cloudevents-batch+json).
#pragma once

#include "core/cloudevents.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pg_outbox::core {

struct BatchElement {
  std::string_view id;            // the message's webhook-id
  std::string_view type;          // empty: none (JSON null; never for CloudEvents)
  std::string_view payload;       // the payload's JSON text
  std::string_view headers_json;  // a JSON object of strings, or empty (Standard Webhooks only)
  int64_t time_unix_us = 0;       // enqueued at (CloudEvents only)
};

// Builds one batch body element by element; the caller decides where a batch ends
// (size_with tells what the body would weigh with one more element).
class BatchBody {
 public:
  BatchBody(Format format, std::string_view source) : format_(format), source_(source) {}

  // The element's JSON text, in `out` (cleared first: a buffer reused from one element
  // to the next keeps its capacity).
  void element(const BatchElement& e, std::string& out) const;
  // The body's size once `element` (element()'s text) is added, with the closing bracket.
  size_t size_with(const std::string& element) const {
    return body_.size() + (count_ > 0 ? 1 : 0) + element.size() + 1;
  }
  void add(const std::string& element);
  size_t count() const { return count_; }
  // The finished body ("[...]"); the builder is empty again.
  std::string take();

 private:
  Format format_;
  std::string_view source_;
  std::string body_ = "[";
  size_t count_ = 0;
};

}  // namespace pg_outbox::core
