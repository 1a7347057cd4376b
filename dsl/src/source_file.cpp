// Reading a mask file (frontend.h): the one reader the CLI and the C API share.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "flexjit/dsl/frontend.h"

namespace flexjit::dsl {

namespace {

// Closes the descriptor on every way out.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SourceFile read_source_file(const std::string& path) {
  SourceFile file;
  FileDescriptor in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) {
    file.error = fmt::format("cannot open '{}': {}", path, std::strerror(errno));
    file.missing = true;
    return file;
  }
  struct stat status {};
  if (::fstat(in.fd, &status) != 0) {
    file.error = fmt::format("cannot read '{}': {}", path, std::strerror(errno));
    return file;
  }
  if (S_ISDIR(status.st_mode)) {
    file.error = fmt::format("cannot read '{}': it is a directory, not a mask file", path);
    return file;
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(in.fd, buffer, sizeof(buffer));
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      file.error = fmt::format("cannot read '{}': {}", path, std::strerror(errno));
      return file;
    }
    if (text.size() + static_cast<size_t>(got) > kMaxSourceFileBytes) {
      file.error = fmt::format("cannot read '{}': larger than {} MiB, too large for a mask file",
                               path, kMaxSourceFileBytes >> 20);
      return file;
    }
    text.append(buffer, static_cast<size_t>(got));
  }
  file.source = Source{path, std::move(text)};
  return file;
}

}  // namespace flexjit::dsl
