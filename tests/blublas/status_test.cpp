// blublas::Status and the check macros: codes, messages and propagation, without a GPU.
#include <gtest/gtest.h>

#include <stdexcept>

#include "blublas/blublas.h"

namespace {

blublas::Status needs_positive(int m) {
  BLUBLAS_CHECK_ARG(m > 0, "op: m=", m, " must be positive");
  return blublas::Status::success();
}

blublas::Status wraps(int m) {
  BLUBLAS_RETURN_IF_ERROR(needs_positive(m));
  return blublas::Status(blublas::StatusCode::kNotSupported, "reached the end");
}

TEST(Status, SuccessByDefault) {
  blublas::Status st;
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(st.to_string(), "kSuccess");
}

TEST(Status, CheckArgFormatsTheMessage) {
  blublas::Status st = needs_positive(-3);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), blublas::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "op: m=-3 must be positive");
  EXPECT_EQ(st.to_string(), "kInvalidArgument: op: m=-3 must be positive");
}

TEST(Status, ReturnIfErrorPropagatesTheFirstFailure) {
  EXPECT_EQ(wraps(-1).code(), blublas::StatusCode::kInvalidArgument);
  EXPECT_EQ(wraps(1).code(), blublas::StatusCode::kNotSupported);
}

TEST(Status, ThrowIfErrorThrowsOnlyOnFailure) {
  EXPECT_NO_THROW(blublas::throw_if_error(blublas::Status::success()));
  EXPECT_THROW(blublas::throw_if_error(needs_positive(0)), std::runtime_error);
}

TEST(Version, MatchesTheCMakeVersion) {
  EXPECT_STREQ(BLUBLAS_VERSION_STRING, "0.1.0");
  EXPECT_EQ(BLUBLAS_VERSION_MAJOR, 0);
}

}  // namespace
