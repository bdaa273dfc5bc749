// Test support: CPU-rank tests need the Gloo backend; builds without libgloo (the GPU device)
// skip them with the reason.
#pragma once

#include <gtest/gtest.h>

#include "bludist/process_group.h"

#define BLUDIST_REQUIRE_GLOO()                                                                 \
  do {                                                                                         \
    if (!::bludist::gloo_available()) GTEST_SKIP() << "built without Gloo (libgloo-dev)";       \
  } while (0)
