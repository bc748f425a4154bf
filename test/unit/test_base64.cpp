#include "core/base64.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace pg_outbox::core;

// RFC 4648 section 10 test vectors.
TEST(Base64, Rfc4648EncodeVectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

TEST(Base64, Rfc4648DecodeVectors) {
  EXPECT_EQ(base64_decode(""), std::string());
  EXPECT_EQ(base64_decode("Zg=="), "f");
  EXPECT_EQ(base64_decode("Zm8="), "fo");
  EXPECT_EQ(base64_decode("Zm9v"), "foo");
  EXPECT_EQ(base64_decode("Zm9vYg=="), "foob");
  EXPECT_EQ(base64_decode("Zm9vYmE="), "fooba");
  EXPECT_EQ(base64_decode("Zm9vYmFy"), "foobar");
}

TEST(Base64, UsesStandardAlphabetForHighBits) {
  EXPECT_EQ(base64_encode(std::string("\xfb\xff\xbf", 3)), "+/+/");
  EXPECT_EQ(base64_decode("+/+/"), std::string("\xfb\xff\xbf", 3));
}

TEST(Base64, RoundTripsAllByteValuesAndLengths) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += char(i);
  for (size_t len = 0; len <= all.size(); len += 7) {
    std::string part = all.substr(0, len);
    auto decoded = base64_decode(base64_encode(part));
    ASSERT_TRUE(decoded.has_value()) << len;
    EXPECT_EQ(*decoded, part);
  }
}

TEST(Base64, RejectsInvalidText) {
  EXPECT_FALSE(base64_decode("Zg"));      // unpadded
  EXPECT_FALSE(base64_decode("Zg="));     // wrong length
  EXPECT_FALSE(base64_decode("Zm9v\n"));  // whitespace
  EXPECT_FALSE(base64_decode("Zm 9"));    // space
  EXPECT_FALSE(base64_decode("Zm9-"));    // URL-safe alphabet
  EXPECT_FALSE(base64_decode("Zm9_"));
  EXPECT_FALSE(base64_decode("Z==="));  // too much padding
  EXPECT_FALSE(base64_decode("===="));
  EXPECT_FALSE(base64_decode("Zg==Zm9v"));  // padding before the end
  EXPECT_FALSE(base64_decode("Z=g="));      // padding inside a group
  EXPECT_FALSE(base64_decode(std::string("Zm9\0", 4)));
  EXPECT_FALSE(base64_decode("Zm9\xc3"));
}

TEST(Base64, RejectsNonCanonicalTrailingBits) {
  EXPECT_FALSE(base64_decode("Zh=="));  // "Zg==" with a stray low bit
  EXPECT_FALSE(base64_decode("Zm9="));  // "Zm8=" with a stray low bit
}
