// The check macros: typed errors with the call text and file:line; out-of-memory as its own type.
// Runs without a GPU (error names and strings come from the libraries, not the device).
#include <gtest/gtest.h>

#include <string>

#include "cuda/check.h"
#include "cuda/owners.h"

namespace vrambench::cuda {
namespace {

TEST(Check, CudaOutOfMemoryIsItsOwnType) {
  try {
    VB_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL() << "no throw";
  } catch (const CudaOutOfMemory& e) {
    EXPECT_EQ(e.library(), Library::cuda);
    EXPECT_EQ(e.code(), static_cast<int>(cudaErrorMemoryAllocation));
    EXPECT_EQ(e.error_name(), "cudaErrorMemoryAllocation");
    EXPECT_NE(std::string(e.what()).find("test_check.cpp:"), std::string::npos) << e.what();
    EXPECT_NE(e.call().find("cudaErrorMemoryAllocation"), std::string::npos);
  }
}

TEST(Check, OtherCudaErrorsAreNotOutOfMemory) {
  try {
    VB_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const CudaOutOfMemory&) {
    FAIL() << "invalid value reported as out of memory";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.error_name(), "cudaErrorInvalidValue");
    EXPECT_GT(e.line(), 0);
    EXPECT_FALSE(e.error_string().empty());
  }
}

TEST(Check, CublasAllocFailedIsOutOfMemory) {
  EXPECT_THROW(VB_CUBLAS_CHECK(CUBLAS_STATUS_ALLOC_FAILED), CudaOutOfMemory);
  try {
    VB_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE);
    FAIL() << "no throw";
  } catch (const CudaOutOfMemory&) {
    FAIL() << "invalid value reported as out of memory";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.library(), Library::cublas);
    EXPECT_EQ(e.error_name(), "CUBLAS_STATUS_INVALID_VALUE");
  }
}

TEST(Check, CudnnDeviceAllocationFailureIsOutOfMemory) {
  EXPECT_THROW(VB_CUDNN_CHECK(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
               CudaOutOfMemory);
  try {
    VB_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM);
    FAIL() << "no throw";
  } catch (const CudaOutOfMemory&) {
    FAIL() << "bad param reported as out of memory";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.library(), Library::cudnn);
    EXPECT_NE(std::string(e.what()).find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << e.what();
  }
}

TEST(Check, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(VB_CUDA_CHECK(cudaSuccess));
  EXPECT_NO_THROW(VB_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
  EXPECT_NO_THROW(VB_CUDNN_CHECK(CUDNN_STATUS_SUCCESS));
}

TEST(Owners, MoveTransfersOwnership) {
  // Backend descriptors are created without a device.
  BackendDescriptor a = make_backend_descriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  ASSERT_TRUE(a);
  const auto raw = a.get();
  BackendDescriptor b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
  EXPECT_EQ(b.get(), raw);
  b.reset();
  EXPECT_FALSE(b);
  DeviceBuffer empty;
  EXPECT_EQ(empty.get(), nullptr);
  EXPECT_EQ(empty.bytes(), 0u);
}

}  // namespace
}  // namespace vrambench::cuda
