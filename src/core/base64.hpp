// Standard base64 (RFC 4648 section 4: "+/" alphabet, "=" padding). Used for the
// Standard Webhooks secret ("whsec_" + base64 key) and the signature it produces.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pg_outbox::core {

// Encodes arbitrary bytes; the result is always padded to a multiple of 4.
std::string base64_encode(std::string_view bytes);

// Decodes padded standard base64 and returns the bytes, or nullopt when the text is
// not canonical base64: wrong length, a character outside the alphabet, misplaced
// padding, or non-zero bits in the unused part of the last group. Being strict
// means a secret has exactly one spelling, so decode(encode(x)) == x and
// encode(decode(t)) == t for every accepted t.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace pg_outbox::core
