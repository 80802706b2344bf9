// A shared-memory segment of one host's ranks (POSIX shm): made by one rank with a name no other
// job can guess and mode 0600, mapped by the others, unlinked as soon as every rank has mapped
// it (the mappings outlive the name), so that nothing is left in /dev/shm after any end.
#pragma once

#include <cstddef>
#include <string>

namespace cerar {

class ShmSegment {
 public:
  // Creates `name` ("/cerar-..."), exclusively (an existing name is an error), of `bytes`
  // zeroed bytes, and maps it.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment whole.
  static ShmSegment open(const std::string& name);
  // Removes the name (the mappings stay); true if it was there.
  static bool unlink(const std::string& name);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ShmSegment(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cerar
