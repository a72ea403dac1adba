// cuBLASLt reached through kernels/cuda/library_loader.cpp, which opens the library on first call:
// the calls answer as the library does. Runs without a GPU (these calls need none).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <string>

namespace {

TEST(LibraryLoader, CublasLtAnswersThroughTheLoader) {
  EXPECT_EQ(cublasLtGetVersion() / 10000, static_cast<std::size_t>(CUBLAS_VER_MAJOR));
  EXPECT_EQ(std::string(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS)), "CUBLAS_STATUS_SUCCESS");
  EXPECT_EQ(std::string(cublasLtGetStatusName(CUBLAS_STATUS_ALLOC_FAILED)),
            "CUBLAS_STATUS_ALLOC_FAILED");
}

}  // namespace
