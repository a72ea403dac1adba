// GPU tests skip only when there is no CUDA device (the reason in the skip message); with a GPU
// present they run and fail when something is wrong, never skip.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "device/cuda_device.h"

#define VB_REQUIRE_GPU()                                                 \
  do {                                                                   \
    std::string vb_why_;                                                 \
    if (!::vrambench::cuda_available(&vb_why_)) GTEST_SKIP() << vb_why_; \
  } while (0)
