// Error types shared by every layer: a user mistake (exit 2, one line) versus an internal failure.
#pragma once

#include <stdexcept>
#include <string>

namespace vrambench {

// A mistake in what the user asked for. The CLI prints what() on one line and exits 2 before any
// output file is opened.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure inside vrambench or a library it calls; carries where it happened.
class InternalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device (or a library on it: cuBLASLt, cuDNN) could not allocate memory while an op ran: a
// trial result like a refused segment, not a failure. Executors translate their library's
// out-of-memory into this type so that code without device headers can catch it.
class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace vrambench
