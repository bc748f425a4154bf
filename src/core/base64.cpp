#include "core/base64.hpp"

#include <cstdint>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Value of one alphabet character, or -1. A switch-free computation keeps this
// independent of the execution character set's ordering only for ASCII, which is
// all we accept anyway.
int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t n =
        (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    // Padding may only appear in the last group, as "x==" or "xx=" tails.
    size_t pad = 0;
    if (last && text[i + 3] == '=') pad = (text[i + 2] == '=') ? 2 : 1;
    uint32_t n = 0;
    for (size_t k = 0; k < 4; ++k) {
      int v = (k >= 4 - pad) ? 0 : sextet(text[i + k]);
      if (v < 0) return std::nullopt;  // also catches '=' anywhere it may not be
      n = (n << 6) | uint32_t(v);
    }
    out += char((n >> 16) & 0xFF);
    if (pad == 2) {
      if ((n & 0xFFFF) != 0) return std::nullopt;  // non-canonical trailing bits
    } else {
      out += char((n >> 8) & 0xFF);
      if (pad == 1) {
        if ((n & 0xFF) != 0) return std::nullopt;
      } else {
        out += char(n & 0xFF);
      }
    }
  }
  return out;
}

}  // namespace pg_outbox::core
