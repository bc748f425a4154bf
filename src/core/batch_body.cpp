#include "core/batch_body.hpp"

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

void BatchBody::element(const BatchElement& e, std::string& out) const {
  out.clear();
  out.reserve(e.payload.size() + e.headers_json.size() + 160);
  if (is_cloudevents(format_)) {
    append_structured_event({e.id, source_, e.type, e.time_unix_us}, e.payload, out);
    return;
  }
  out += R"({"id":)";
  append_json_string(e.id, out);
  out += R"(,"type":)";
  if (e.type.empty())
    out += "null";
  else
    append_json_string(e.type, out);
  if (!e.headers_json.empty()) {
    out += R"(,"headers":)";
    out += e.headers_json;
  }
  out += R"(,"payload":)";
  out += e.payload;
  out += '}';
}

void BatchBody::add(const std::string& element) {
  if (count_ > 0) body_ += ',';
  body_ += element;
  ++count_;
}

std::string BatchBody::take() {
  std::string body = std::move(body_);
  body += ']';
  body_.clear();
  body_.reserve(body.size());  // the next batch is likely as large
  body_ += '[';
  count_ = 0;
  return body;
}

}  // namespace pg_outbox::core
