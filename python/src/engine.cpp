// vrambench._engine: the vrambench command line (src/cli/app.h) inside Python, the one engine the
// package runs. `main` runs a command line as the program does (its stdout and stderr, its exit
// code: the console script); `run` runs one for the API, its output kept and returned, a mistake
// raised as ValueError holding the line the program prints after "vrambench: error: ".
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <tuple>
#include <vector>

#include "cli/app.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/version.h"

namespace nb = nanobind;

namespace {

// A C stream whose text is kept in memory (open_memstream), for a command's output.
class MemoryStream {
 public:
  MemoryStream() : file_(open_memstream(&data_, &size_)) {
    if (file_ == nullptr) throw std::runtime_error("vrambench: open_memstream failed");
  }
  MemoryStream(const MemoryStream&) = delete;
  MemoryStream& operator=(const MemoryStream&) = delete;
  ~MemoryStream() {
    close();
    std::free(data_);
  }
  std::FILE* file() const { return file_; }
  // Everything written, once the stream is closed.
  std::string text() {
    close();
    return data_ == nullptr ? std::string() : std::string(data_, size_);
  }

 private:
  void close() {
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
  }
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "The vrambench command line (every command) as the vrambench package runs it.";
  // A mistake in the request (CLI11's refusals included) is the caller's: ValueError, the message
  // the program prints.
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const vrambench::UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def(
      "main",
      [](const std::vector<std::string>& args) {
        // The program's heap policy (core/heap.h): this process is the command.
        vrambench::keep_freed_memory();
        nb::gil_scoped_release release;
        const int code = vrambench::cli_main(args);
        std::fflush(stdout);
        std::fflush(stderr);
        return code;
      },
      nb::arg("args"),
      "Runs a command line as the vrambench program does, on this process's stdout and stderr; "
      "returns its exit code (2 for a mistake, printed on one line).");

  m.def(
      "run",
      [](const std::vector<std::string>& args) {
        MemoryStream out, err;
        int code = 0;
        {
          nb::gil_scoped_release release;
          code = vrambench::run_cli(args, {out.file(), err.file()});
        }
        return std::make_tuple(code, out.text(), err.text());
      },
      nb::arg("args"),
      "Runs a command line with its output kept: (exit code, stdout text, stderr text). A mistake "
      "raises ValueError with the program's one line.");

  m.attr("version") = vrambench::kVersion;
  m.attr("git_commit") = vrambench::kGitCommit;
}
