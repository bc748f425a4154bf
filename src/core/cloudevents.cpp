#include "core/cloudevents.hpp"

#include <ctime>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

constexpr char kHex[] = "0123456789ABCDEF";

void append_percent(unsigned char c, std::string& out) {
  out += '%';
  out += kHex[c >> 4];
  out += kHex[c & 0x0f];
}

void append_digits(int64_t value, int width, std::string& out) {
  char buf[24];
  int n = 0;
  do {
    buf[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 || n < width);
  while (n > 0) out += buf[--n];
}

}  // namespace

std::optional<Format> parse_format(std::string_view text) {
  if (text == "standard-webhooks") return Format::StandardWebhooks;
  if (text == "cloudevents-binary") return Format::CloudEventsBinary;
  if (text == "cloudevents-structured") return Format::CloudEventsStructured;
  return std::nullopt;
}

std::string default_source(std::string_view database, std::string_view endpoint) {
  std::string out = "/pg_outbox/";
  for (char ch : database) {
    const unsigned char c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '.' || c == '_' || c == '~';
    if (unreserved)
      out += ch;
    else
      append_percent(c, out);
  }
  out += '/';
  out += endpoint;
  return out;
}

std::string rfc3339_utc(int64_t unix_us) {
  int64_t seconds = unix_us / 1000000;
  int64_t micros = unix_us % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --seconds;
  }
  // gmtime_r: UTC, neither the locale nor TZ takes part.
  const time_t t = static_cast<time_t>(seconds);
  struct tm parts {};
  gmtime_r(&t, &parts);
  std::string out;
  out.reserve(27);
  append_digits(parts.tm_year + 1900, 4, out);
  out += '-';
  append_digits(parts.tm_mon + 1, 2, out);
  out += '-';
  append_digits(parts.tm_mday, 2, out);
  out += 'T';
  append_digits(parts.tm_hour, 2, out);
  out += ':';
  append_digits(parts.tm_min, 2, out);
  out += ':';
  append_digits(parts.tm_sec, 2, out);
  out += '.';
  append_digits(micros, 6, out);
  out += 'Z';
  return out;
}

std::string percent_encode_header_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char ch : value) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%')
      append_percent(c, out);
    else
      out += ch;
  }
  return out;
}

void append_binary_headers(const CloudEvent& event, std::vector<std::string>& lines) {
  lines.emplace_back("ce-specversion: 1.0");
  lines.push_back("ce-id: " + percent_encode_header_value(event.id));
  lines.push_back("ce-source: " + percent_encode_header_value(event.source));
  lines.push_back("ce-type: " + percent_encode_header_value(event.type));
  lines.push_back("ce-time: " + rfc3339_utc(event.time_unix_us));
}

void append_json_string(std::string_view text, std::string& out) {
  out += '"';
  size_t plain = 0;  // the start of the run of characters that need no escape
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c != '"' && c != '\\' && c >= 0x20) continue;
    out.append(text, plain, i - plain);
    plain = i + 1;
    if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0x0f];
    } else {
      out += '\\';
      out += static_cast<char>(c);
    }
  }
  out.append(text, plain, text.size() - plain);
  out += '"';
}

void append_structured_event(const CloudEvent& event, std::string_view data_json, std::string& out) {
  out += R"({"specversion":"1.0","id":)";
  append_json_string(event.id, out);
  out += R"(,"source":)";
  append_json_string(event.source, out);
  out += R"(,"type":)";
  append_json_string(event.type, out);
  out += R"(,"time":")";
  out += rfc3339_utc(event.time_unix_us);
  out += R"(","datacontenttype":"application/json","data":)";
  out += data_json;
  out += '}';
}

std::string_view content_type_of(Format format) {
  return format == Format::CloudEventsStructured ? "application/cloudevents+json" : "application/json";
}

std::string_view batch_content_type_of(Format format) {
  return is_cloudevents(format) ? "application/cloudevents-batch+json" : "application/json";
}

}  // namespace pg_outbox::core
