#include "ops/transport/nccl_library.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"

namespace cerar {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

std::mutex& libraryMutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& searchFolders() {
  static std::vector<std::string> folders;
  return folders;
}

// Resolves every entry point of an opened handle; false (and `why`) if one is missing.
bool resolve(void* handle, NcclLibrary& lib, std::string& why) {
  bool ok = true;
  auto get = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(handle, name));
    if (!slot) {
      ok = false;
      why = detail::concat(why, " missing ", name, ";");
    }
  };
  get(lib.getVersion, "ncclGetVersion");
  get(lib.getUniqueId, "ncclGetUniqueId");
  get(lib.commInitRankConfig, "ncclCommInitRankConfig");
  get(lib.commFinalize, "ncclCommFinalize");
  get(lib.commDestroy, "ncclCommDestroy");
  get(lib.commAbort, "ncclCommAbort");
  get(lib.commGetAsyncError, "ncclCommGetAsyncError");
  get(lib.groupStart, "ncclGroupStart");
  get(lib.groupEnd, "ncclGroupEnd");
  get(lib.send, "ncclSend");
  get(lib.recv, "ncclRecv");
  get(lib.getErrorString, "ncclGetErrorString");
  get(lib.reduceScatter, "ncclReduceScatter");
  get(lib.allGather, "ncclAllGather");
  get(lib.reduce, "ncclReduce");
  get(lib.broadcast, "ncclBroadcast");
  return ok;
}

// Tries one candidate (a path, or the bare soname for the loader's search); `mode` adds
// RTLD_NOLOAD for "already in the process". Appends what went wrong to `tried`.
bool tryOpen(const std::string& file, int mode, NcclLibrary& lib, std::string& tried) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | mode);
  if (!handle) {
    if (!(mode & RTLD_NOLOAD)) {
      const char* err = dlerror();
      tried = detail::concat(tried, "\n  ", file, ": ", err ? err : "not found");
    }
    return false;
  }
  std::string why;
  if (!resolve(handle, lib, why)) {
    tried = detail::concat(tried, "\n  ", file, ": too old an NCCL (", why, ")");
    dlclose(handle);
    return false;
  }
  // Needs 2.19 or later: the non-blocking config and ncclCommFinalize the transport relies on.
  lib.getVersion(&lib.version);
  if (lib.version < 21900) {
    tried = detail::concat(tried, "\n  ", file, ": NCCL ", lib.version, " is older than 2.19");
    dlclose(handle);
    return false;
  }
  Dl_info info{};
  lib.path = dladdr(reinterpret_cast<void*>(lib.getVersion), &info) && info.dli_fname
                 ? info.dli_fname : file;
  return true;  // the handle stays open for the life of the process
}

struct Loaded {
  NcclLibrary lib;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded out;
  std::string tried;
  if (tryOpen(kSoname, RTLD_NOLOAD, out.lib, tried)) {
    out.ok = true;
    return out;
  }
  std::vector<std::string> candidates;
  for (const std::string& folder : searchFolders()) candidates.push_back(folder + "/" + kSoname);
  candidates.push_back(kSoname);
  candidates.push_back(std::string("/usr/local/cuda/lib64/") + kSoname);
  candidates.push_back(std::string("/usr/local/cuda/lib/") + kSoname);
  for (const std::string& file : candidates) {
    if (tryOpen(file, 0, out.lib, tried)) {
      out.ok = true;
      return out;
    }
  }
  out.why = detail::concat(
      "NCCL (", kSoname, ", 2.19 or later) is needed for CUDA tensors and was not found; tried:",
      tried, "\nInstall it with `pip install nvidia-nccl-cu13` (or the cu12 package matching "
      "your CUDA), or put the folder that holds ", kSoname, " on LD_LIBRARY_PATH.");
  return out;
}

const Loaded& loaded() {
  std::lock_guard<std::mutex> lock(libraryMutex());
  static const Loaded once = load();
  return once;
}

}  // namespace

void setNcclSearchFolders(std::vector<std::string> folders) {
  std::lock_guard<std::mutex> lock(libraryMutex());
  searchFolders() = std::move(folders);
}

const NcclLibrary* tryNcclLibrary(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.lib : nullptr;
}

const NcclLibrary& ncclLibrary() {
  std::string why;
  const NcclLibrary* lib = tryNcclLibrary(&why);
  if (!lib) throw InvalidArgumentError(why);
  return *lib;
}

}  // namespace cerar
