#include "ops/transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace cerar {

namespace {
[[noreturn]] void fail(const char* what, const std::string& name) {
  throw Error(detail::concat("shared memory ", name, ": ", what, ": ", std::strerror(errno)));
}

void* mapWhole(int fd, size_t bytes, const std::string& name) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    ::close(fd);
    fail("mmap", name);
  }
  ::close(fd);  // the mapping keeps the memory
  return data;
}
}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail("create", name);
  if (ftruncate(fd, off_t(bytes)) != 0) {  // zero-filled
    ::close(fd);
    shm_unlink(name.c_str());
    fail("size", name);
  }
  try {
    return ShmSegment(mapWhole(fd, bytes, name), bytes);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

ShmSegment ShmSegment::open(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) fail("open", name);
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    ::close(fd);
    fail("stat", name);
  }
  // Another user's segment of that name would not open (mode 0600), but say so plainly.
  if (info.st_uid != geteuid()) {
    ::close(fd);
    throw Error(detail::concat("shared memory ", name, " belongs to another user"));
  }
  return ShmSegment(mapWhole(fd, size_t(info.st_size), name), size_t(info.st_size));
}

bool ShmSegment::unlink(const std::string& name) { return shm_unlink(name.c_str()) == 0; }

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace cerar
