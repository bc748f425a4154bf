#include "core/signing_key.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/base64.hpp"
#include "core/ed25519.hpp"
#include "core/validation.hpp"
#include "core/webhook_signature.hpp"

using namespace pg_outbox::core;

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// RFC 8032, section 7.1, TEST 1 and TEST 2.
const std::string kSeed1 = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const std::string kPublic1 = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const std::string kSeed2 = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
const std::string kPublic2 = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";

const std::string kWhsk1 = "whsk_" + base64_encode(unhex(kSeed1));
const std::string kWhsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

}  // namespace

TEST(Ed25519, Rfc8032Test1EmptyMessage) {
  Ed25519Key key(unhex(kSeed1));
  EXPECT_EQ(hex(key.public_key()), kPublic1);
  EXPECT_EQ(
      hex(key.sign("")),
      "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe"
      "24655141438e7a100b");
}

TEST(Ed25519, Rfc8032Test2OneByte) {
  Ed25519Key key(unhex(kSeed2));
  EXPECT_EQ(hex(key.public_key()), kPublic2);
  EXPECT_EQ(
      hex(key.sign(unhex("72"))),
      "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb430"
      "2aeeb00d291612bb0c00");
}

TEST(Ed25519, SeedMustBe32Bytes) {
  EXPECT_THROW(Ed25519Key(std::string(31, 'k')), std::invalid_argument);
  EXPECT_THROW(Ed25519Key(std::string(64, 'k')), std::invalid_argument);
}

TEST(SigningKey, SchemesByPrefix) {
  EXPECT_EQ(SigningKey::parse(kWhsec).scheme(), SignatureScheme::kHmacSha256);
  EXPECT_EQ(SigningKey::parse(kWhsk1).scheme(), SignatureScheme::kEd25519);
}

TEST(SigningKey, PublicKeyOfAnEd25519SecretOnly) {
  EXPECT_EQ(SigningKey::parse(kWhsk1).public_key(), "whpk_" + base64_encode(unhex(kPublic1)));
  EXPECT_EQ(SigningKey::parse(kWhsk1).public_key(), "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=");
  EXPECT_EQ(SigningKey::parse(kWhsec).public_key(), "");
}

// The Standard Webhooks content of its published HMAC vector, signed with the RFC 8032
// TEST 1 key; the expected value was computed with Node's crypto.sign(null, ...), an
// implementation that is not ours.
TEST(SigningKey, V1aSignatureOverTheStandardWebhooksContent) {
  EXPECT_EQ(webhook_signature(kWhsk1, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, R"({"test": 2432232314})"),
            "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw==");
}

// The key pair's 64 bytes (seed, then public key) are the same key as the seed alone.
TEST(SigningKey, SeedAndKeyPairFormsSignAlike) {
  const std::string pair = "whsk_" + base64_encode(unhex(kSeed1) + unhex(kPublic1));
  EXPECT_EQ(check_secret(pair), std::nullopt);
  EXPECT_EQ(SigningKey::parse(pair).sign("content"), SigningKey::parse(kWhsk1).sign("content"));
  EXPECT_EQ(SigningKey::parse(pair).public_key(), SigningKey::parse(kWhsk1).public_key());
}

TEST(SigningKey, MalformedEd25519SecretsAreRefusedWithoutLeakingThem) {
  const std::string seed = unhex(kSeed1);
  const std::string bad[] = {
      "whsk_" + base64_encode(seed.substr(0, 31)),                    // 31 bytes
      "whsk_" + base64_encode(seed + "x"),                            // 33 bytes
      "whsk_" + base64_encode(seed + unhex(kPublic2)),                // another key's public half
      "whsk_" + base64_encode(seed + unhex(kPublic1).substr(0, 31)),  // 63 bytes
      "whsk_" + base64_encode(seed).substr(0, 43),                    // not padded
      "whsk_",
      "whpk_" + base64_encode(unhex(kPublic1)),  // the public key given as the secret
  };
  for (const std::string& s : bad) {
    auto problem = check_secret(s);
    ASSERT_TRUE(problem.has_value()) << s;
    if (s.size() > 5) EXPECT_EQ(problem->find(s.substr(5, 12)), std::string::npos) << *problem;
    EXPECT_THROW(SigningKey::parse(s), std::invalid_argument) << s;
  }
  EXPECT_NE(check_secret("whpk_" + base64_encode(unhex(kPublic1)))->find("public key"), std::string::npos);
}

TEST(WebhookSignatures, OnePerKeyInOrderSpaceSeparated) {
  SigningKeys keys{SigningKey::parse(kWhsec), SigningKey::parse(kWhsk1)};
  const std::string header = webhook_signatures(keys, "msg_1", 1700000000, "{}");
  EXPECT_EQ(header, webhook_signature(kWhsec, "msg_1", 1700000000, "{}") + " " +
                        webhook_signature(kWhsk1, "msg_1", 1700000000, "{}"));
  EXPECT_EQ(webhook_signatures({}, "msg_1", 1700000000, "{}"), "");
}

TEST(KeysInForce, AnExpiredKeyNoLongerSigns) {
  const SigningKey current = SigningKey::parse(kWhsk1);
  const SigningKey old = SigningKey::parse(kWhsec);
  const std::vector<RotatingKey> ring{{current, 0}, {old, 10000}};
  auto schemes = [&](int64_t now_ms) {
    std::vector<SignatureScheme> out;
    for (const SigningKey& k : keys_in_force(ring, now_ms)) out.push_back(k.scheme());
    return out;
  };
  using S = SignatureScheme;
  EXPECT_EQ(schemes(0), (std::vector<S>{S::kEd25519, S::kHmacSha256}));
  EXPECT_EQ(schemes(9999), (std::vector<S>{S::kEd25519, S::kHmacSha256}));
  EXPECT_EQ(schemes(10000), (std::vector<S>{S::kEd25519}));  // its expiry is the first moment it is gone
  EXPECT_EQ(schemes(INT64_MAX), (std::vector<S>{S::kEd25519}));
  EXPECT_TRUE(keys_in_force({}, 0).empty());
}

// The worker's thread signs a request while the delivery thread signs another one again
// (a restamp) with the same keys: one shared, immutable key signs from both at once, and
// ed25519 being deterministic, every signature is the expected one. (Under
// ThreadSanitizer in test/run_all.sh.)
TEST(SigningKey, OneKeySignsFromTwoThreadsAtOnce) {
  const SigningKeys keys{SigningKey::parse(kWhsk1), SigningKey::parse(kWhsec)};
  const std::string expected = webhook_signatures(keys, "msg_1", 1700000000, "{}");
  std::atomic<int> wrong{0};
  auto sign_many = [&, copy = keys]() {
    for (int i = 0; i < 200; ++i)
      if (webhook_signatures(copy, "msg_1", 1700000000, "{}") != expected) ++wrong;
  };
  std::thread a(sign_many);
  std::thread b(sign_many);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}
