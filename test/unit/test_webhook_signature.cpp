#include "core/webhook_signature.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

using namespace pg_outbox::core;

namespace {

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

}  // namespace

// RFC 4231 section 4, HMAC-SHA-256 results of test cases 1, 2, 3, 4, 6 and 7.
TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += char(i);
  EXPECT_EQ(hex(hmac_sha256(key4, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'),
                            "This is a test using a larger than block-size key and a larger than "
                            "block-size data. The key needs to be hashed before being used by the "
                            "HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, EmptyKeyAndMessageAreFine) {
  // Cross-checked with: python3 -c 'import hmac,hashlib;print(hmac.new(b"",b"",hashlib.sha256).hexdigest())'
  EXPECT_EQ(hex(hmac_sha256("", "")), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

// The published Standard Webhooks test vector (standard-webhooks repository,
// libraries/go/webhook_test.go, TestWebhookSign); also cross-checked with
// `openssl dgst -sha256 -mac HMAC` and Python's hmac module.
TEST(WebhookSignature, StandardWebhooksReferenceVector) {
  EXPECT_EQ(webhook_signature("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                              R"({"test": 2432232314})"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(WebhookSignature, EveryInputChangesTheSignature) {
  const std::string secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const std::string base = webhook_signature(secret, "msg_1", 1000, "{}");
  EXPECT_NE(base, webhook_signature(secret, "msg_2", 1000, "{}"));
  EXPECT_NE(base, webhook_signature(secret, "msg_1", 1001, "{}"));
  EXPECT_NE(base, webhook_signature(secret, "msg_1", 1000, "{ }"));
  EXPECT_NE(base, webhook_signature("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "msg_1", 1000, "{}"));
  EXPECT_EQ(base.substr(0, 3), "v1,");
  EXPECT_EQ(base.size(), 3u + 44u);  // base64 of 32 bytes
}

TEST(WebhookSignature, BadSecretThrowsWithoutLeakingIt) {
  const std::string bad[] = {"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not*base64!",
                             "whsec_AAAA" /* 3 bytes: too short */};
  for (const auto& secret : bad) {
    try {
      webhook_signature(secret, "msg_1", 1, "{}");
      ADD_FAILURE() << "no exception for a bad secret";
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      EXPECT_FALSE(what.empty());
      if (secret.size() > 6) {
        EXPECT_EQ(what.find(secret.substr(6)), std::string::npos) << what;
      }
    }
  }
}
