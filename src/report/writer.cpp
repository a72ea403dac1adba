// ResultWriter: the lock, the partials a row at a time, and the final files made from the JSON
// Lines partial in the sweep's order.
#include "report/writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "core/error.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

std::string os_reason(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// A file written a piece at a time; any failure (a full disk, a read-only folder) is one
// UsageError naming the file and the reason.
class OutFile {
 public:
  OutFile(std::string path, const char* mode) : path_(std::move(path)) {
    errno = 0;
    file_ = std::fopen(path_.c_str(), mode);
    if (file_ == nullptr) fail(errno);
  }
  ~OutFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void write(std::string_view text) {
    errno = 0;
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) fail(errno);
  }
  // Flushes to the OS (a kill loses nothing written) and closes.
  void close() {
    errno = 0;
    const bool flushed = std::fflush(file_) == 0;
    const int err = errno;
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!flushed || !closed) fail(flushed ? errno : err);
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  [[noreturn]] void fail(int err) const {
    throw UsageError(fmt::format("cannot write '{}': {}", path_, os_reason(err)));
  }
};

// `text` appended to `path` and flushed.
void append_text(const std::string& path, std::string_view text) {
  OutFile file(path, "a");
  file.write(text);
  file.close();
}

// The file at `path` appears whole or not at all: `write` fills a temporary file, renamed over it.
void replace_file(const std::string& path, const std::function<void(OutFile&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    OutFile file(tmp, "w");
    write(file);
    file.close();
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw UsageError(fmt::format("cannot write '{}': {}", path, ec.message()));
  }
}

// Creates `folder` and its parents; returns the first one it created ("" when it existed).
std::string create_folder(const std::string& folder) {
  if (folder.empty()) return "";  // the current directory
  std::error_code ec;
  fs::path first_missing;
  for (fs::path p = fs::absolute(folder, ec); !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    first_missing = p;
    if (p == p.parent_path()) break;
  }
  fs::create_directories(folder, ec);
  if (ec) throw UsageError(fmt::format("cannot create folder '{}': {}", folder, ec.message()));
  return first_missing.string();
}

// A row with its keys in column order (nlohmann::json would sort them).
ordered_json ordered_row(const Table& header, const std::vector<Cell>& row) {
  const nlohmann::json values = json_row(header, row);
  ordered_json out = ordered_json::object();
  for (const Column& column : header.columns) out[column.key] = values.at(column.key);
  return out;
}

// A value printed as dump(2) prints it `depth` levels deep in a document.
template <typename Json>
std::string indented(const Json& value, int depth) {
  const std::string text = value.dump(2);
  std::string newline(static_cast<std::size_t>(1 + 2 * depth), ' ');
  newline[0] = '\n';
  std::string out;
  for (const char c : text) {
    if (c == '\n')
      out += newline;
    else
      out += c;
  }
  return out;
}

std::string json_key(const std::string& key) {
  return nlohmann::json(key).dump();
}

}  // namespace

ResultWriter::ResultWriter(std::string folder, std::string name, Table header_only,
                           Provenance provenance, bool write_csv, bool write_json)
    : folder_(std::move(folder)),
      name_(std::move(name)),
      header_(std::move(header_only)),
      provenance_(std::move(provenance)),
      write_csv_(write_csv),
      write_json_(write_json),
      markdown_(header_.columns) {
  header_.rows.clear();
  if (writes_files()) lock();
}

ResultWriter::~ResultWriter() {
  unlock();
  if (!created_folder_.empty() && !opened_ && !finished_) {
    // Nothing was written: the folders this writer made go again (each only when empty).
    std::error_code ec;
    for (fs::path p = fs::absolute(folder_, ec); !p.empty(); p = p.parent_path()) {
      if (!fs::remove(p, ec)) break;
      if (p == fs::path(created_folder_)) break;
    }
  }
}

// An fcntl lock on NAME.lock: it belongs to this process (not to the children it forks) and goes
// with it, however it ends; a lock file left by a killed run is taken again.
void ResultWriter::lock() {
  created_folder_ = create_folder(folder_);
  const std::string lock_path = path(".lock");
  for (int attempt = 0; attempt < 8; ++attempt) {
    errno = 0;
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw UsageError(fmt::format("cannot write '{}': {}", lock_path, os_reason(errno)));
    struct flock whole {};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;
    if (::fcntl(fd, F_SETLK, &whole) != 0) {
      const int err = errno;
      char pid[32] = {};
      const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
      ::close(fd);
      if (err == EACCES || err == EAGAIN)
        throw UsageError(fmt::format(
            "another run{} is writing '{}' (it holds '{}'): wait for it, or give another --name",
            n > 0 ? fmt::format(" (pid {})", std::string(pid, static_cast<std::size_t>(n))) : "",
            path(""), lock_path));
      throw UsageError(fmt::format("cannot lock '{}': {}", lock_path, os_reason(err)));
    }
    // The run before may have removed the file between our open and our lock: the lock must be
    // on the file the path names now.
    struct stat held = {};
    struct stat named = {};
    if (::fstat(fd, &held) != 0 || ::stat(lock_path.c_str(), &named) != 0 ||
        held.st_ino != named.st_ino || held.st_dev != named.st_dev) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      const int err = errno;
      ::close(fd);
      throw UsageError(fmt::format("cannot write '{}': {}", lock_path, os_reason(err)));
    }
    lock_fd_ = fd;
    return;
  }
  throw UsageError(fmt::format("cannot lock '{}': it keeps being replaced", lock_path));
}

void ResultWriter::unlock() noexcept {
  if (lock_fd_ < 0) return;
  // Removed while held, so that a run waiting on the old file finds it gone and locks anew.
  ::unlink(path(".lock").c_str());
  ::close(lock_fd_);
  lock_fd_ = -1;
}

std::string ResultWriter::path(std::string_view extension) const {
  return (fs::path(folder_) / (name_ + std::string(extension))).string();
}

void ResultWriter::record(std::size_t index, const std::vector<Cell>& row) {
  markdown_.widen(row);
  if (writes_files()) {
    if (offsets_.size() <= index) offsets_.resize(index + 1, -1);
    if (offsets_[index] < 0) ++rows_;
    offsets_[index] = spool_size_;
  } else {
    if (held_.size() <= index) held_.resize(index + 1);
    if (held_[index].empty()) ++rows_;
    held_[index] = row;
  }
}

std::string ResultWriter::provenance_line() const {
  return ordered_json{{"provenance", nlohmann::json(provenance_)}}.dump() + '\n';
}

std::string ResultWriter::partial_line(const std::vector<Cell>& row,
                                       const nlohmann::json& details) const {
  ordered_json line = ordered_row(header_, row);
  if (!details.is_null()) line["details"] = details;
  return line.dump() + '\n';
}

// The provenance line and the CSV header: what the partials start with.
void ResultWriter::open_partials() {
  const std::string head = provenance_line();
  OutFile spool(path(".jsonl.partial"), "w");
  spool.write(head);
  spool.close();
  spool_size_ = static_cast<std::int64_t>(head.size());
  if (write_csv_) {
    OutFile csv(path(".csv.partial"), "w");
    csv.write(csv_header(header_) + '\n');
    csv.close();
  }
  opened_ = true;
}

void ResultWriter::resume(const std::function<void(const Keep& keep)>& read) {
  if (opened_ || rows_ > 0) throw InternalError("ResultWriter::resume after a row");
  if (!writes_files()) {
    read([&](std::size_t index, const std::vector<Cell>& row, const nlohmann::json&) {
      record(index, row);
    });
    return;
  }
  // The partials may be what the rows are read from: each is written anew beside it and renamed
  // over it, never truncated.
  const std::string spool = path(".jsonl.partial"), csv = path(".csv.partial");
  const auto remove_temporaries = [&] {
    std::error_code ec;
    fs::remove(spool + ".tmp", ec);
    fs::remove(csv + ".tmp", ec);
  };
  try {
    OutFile spool_file(spool + ".tmp", "w");
    std::optional<OutFile> csv_file;
    if (write_csv_) csv_file.emplace(csv + ".tmp", "w");
    const std::string head = provenance_line();
    spool_file.write(head);
    spool_size_ = static_cast<std::int64_t>(head.size());
    if (csv_file) csv_file->write(csv_header(header_) + '\n');
    read([&](std::size_t index, const std::vector<Cell>& row, const nlohmann::json& details) {
      const std::string line = partial_line(row, details);
      spool_file.write(line);
      if (csv_file) csv_file->write(csv_row(header_, row) + '\n');
      record(index, row);
      spool_size_ += static_cast<std::int64_t>(line.size());
    });
    spool_file.close();
    if (csv_file) csv_file->close();
  } catch (...) {
    remove_temporaries();
    throw;
  }
  std::error_code ec;
  fs::rename(spool + ".tmp", spool, ec);
  if (!ec && write_csv_) fs::rename(csv + ".tmp", csv, ec);
  if (ec) {
    remove_temporaries();
    throw UsageError(fmt::format("cannot write '{}': {}", spool, ec.message()));
  }
  opened_ = true;
}

void ResultWriter::append(std::size_t index, const std::vector<Cell>& row,
                          const nlohmann::json& details) {
  if (finished_) throw InternalError("ResultWriter::append after finish");
  const std::string csv = csv_row(header_, row);  // checks the width
  if (!writes_files()) {
    record(index, row);
    return;
  }
  try {
    if (!opened_) open_partials();
    const std::string line = partial_line(row, details);
    append_text(path(".jsonl.partial"), line);
    record(index, row);
    spool_size_ += static_cast<std::int64_t>(line.size());
    if (write_csv_) append_text(path(".csv.partial"), csv + '\n');
  } catch (const UsageError& e) {
    throw UsageError(fmt::format(
        "{} (the rows finished before it are in '{}': once it can be written, run the same "
        "command with --resume)",
        e.what(), path(".jsonl.partial")));
  }
}

// Every row, in index order, read back from the JSON Lines partial a line at a time.
void ResultWriter::each_row(const std::function<void(FinishedRow&&)>& visit) const {
  if (rows_ == 0) return;
  const std::string spool = path(".jsonl.partial");
  std::ifstream in(spool, std::ios::binary);
  if (!in)
    throw UsageError(fmt::format("cannot read '{}': it was removed while the run wrote", spool));
  const std::string where = fmt::format("'{}'", spool);
  std::string line;
  for (const std::int64_t offset : offsets_) {
    if (offset < 0) continue;
    in.seekg(offset);
    if (!std::getline(in, line))
      throw UsageError(fmt::format("cannot read '{}': it changed while the run wrote", spool));
    visit(partial_row(header_.columns, line, where));
  }
}

void ResultWriter::for_each_row(const std::function<void(const std::vector<Cell>&)>& visit) const {
  if (!writes_files()) {
    for (const auto& row : held_)
      if (!row.empty()) visit(row);
    return;
  }
  each_row([&](FinishedRow&& row) { visit(row.cells); });
}

void ResultWriter::finish(const nlohmann::json& summary, bool with_details) {
  if (finished_) throw InternalError("ResultWriter::finish called twice");
  if (!writes_files()) {
    finished_ = true;
    return;
  }
  if (!opened_) open_partials();  // no row: the final files are the header alone
  std::vector<std::string> finished;
  if (write_csv_) {
    finished.push_back(path(".csv"));
    replace_file(finished.back(), [&](OutFile& file) {
      file.write(csv_header(header_) + '\n');
      each_row([&](FinishedRow&& row) { file.write(csv_row(header_, row.cells) + '\n'); });
    });
  }
  if (write_json_) {
    finished.push_back(path(".json"));
    replace_file(finished.back(), [&](OutFile& file) {
      write_json_document([&file](std::string_view text) { file.write(text); }, summary,
                          with_details);
    });
  }
  // The final files hold every row now; a partial left behind would only confuse a reader.
  std::error_code ec;
  fs::remove(path(".csv.partial"), ec);
  fs::remove(path(".jsonl.partial"), ec);
  written_ = std::move(finished);
  finished_ = true;
  unlock();
}

// The document dump(2) prints for {"provenance", "summary" (its keys sorted, "details" among
// them), "columns", "rows"}, with the rows and their details streamed from the partial.
void ResultWriter::write_json_document(const std::function<void(std::string_view)>& write,
                                       const nlohmann::json& summary, bool with_details) const {
  write("{\n  \"provenance\": " + indented(nlohmann::json(provenance_), 1) + ",\n");
  // The summary's members in key order, each written by a function: "details" is the rows'.
  std::vector<std::pair<std::string, std::function<void()>>> members;
  if (summary.is_object())
    for (const auto& [key, value] : summary.items())
      if (key != "details")
        members.emplace_back(key, [&write, &value] { write(indented(value, 2)); });
  if (with_details) {
    const auto details = [&] {
      write("[");
      bool first = true;
      each_row([&](FinishedRow&& row) {
        write((first ? "\n      " : ",\n      ") + indented(row.details, 3));
        first = false;
      });
      write(first ? "]" : "\n    ]");
    };
    const auto at = std::find_if(members.begin(), members.end(),
                                 [](const auto& m) { return m.first > "details"; });
    members.emplace(at, "details", details);
  }
  if (members.empty()) {
    write("  \"summary\": {},\n");
  } else {
    write("  \"summary\": {");
    for (std::size_t m = 0; m < members.size(); ++m) {
      write((m == 0 ? "\n    " : ",\n    ") + json_key(members[m].first) + ": ");
      members[m].second();
    }
    write("\n  },\n");
  }
  ordered_json columns = ordered_json::array();
  for (const Column& column : header_.columns)
    columns.push_back(
        {{"key", column.key}, {"title", column.title}, {"kind", kind_name(column.kind)}});
  write("  \"columns\": " + indented(columns, 1) + ",\n  \"rows\": [");
  bool first = true;
  each_row([&](FinishedRow&& row) {
    write((first ? "\n    " : ",\n    ") + indented(ordered_row(header_, row.cells), 2));
    first = false;
  });
  write(first ? "]\n}\n" : "\n  ]\n}\n");
}

std::vector<std::string> ResultWriter::written_files() const {
  return written_;
}

}  // namespace vrambench
