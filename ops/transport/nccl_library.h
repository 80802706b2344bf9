// NCCL found and loaded at run time (dlopen), not at link time: an extension built with the CUDA
// parts imports and runs on a machine without NCCL, and a wheel finds the libnccl.so.2 that
// PyPI's nvidia-nccl packages or the system's CUDA provide (docs/install.md).
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

namespace cerar {

// The NCCL entry points the transport calls, resolved from one loaded libnccl.so.2.
struct NcclLibrary {
  decltype(&ncclGetVersion) getVersion;
  decltype(&ncclGetUniqueId) getUniqueId;
  decltype(&ncclCommInitRankConfig) commInitRankConfig;
  decltype(&ncclCommFinalize) commFinalize;
  decltype(&ncclCommDestroy) commDestroy;
  decltype(&ncclCommAbort) commAbort;
  decltype(&ncclCommGetAsyncError) commGetAsyncError;
  decltype(&ncclGroupStart) groupStart;
  decltype(&ncclGroupEnd) groupEnd;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclReduceScatter) reduceScatter;  // a host's own level (ops/hierarchical.h)
  decltype(&ncclAllGather) allGather;
  decltype(&ncclReduce) reduce;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclGetErrorString) getErrorString;
  std::string path;  // the file it came from
  int version = 0;   // NCCL_VERSION_CODE of the loaded library
};

// Folders searched (in order) before the loader's own search path; the Python package passes
// those of the nvidia-nccl packages it sees on sys.path. Call before the first ncclLibrary().
void setNcclSearchFolders(std::vector<std::string> folders);

// The loaded library, loading it on first use: one already in the process (e.g. torch's), else
// the search folders, the loader's path (LD_LIBRARY_PATH, ldconfig), then /usr/local/cuda.
// Throws cerar::Error naming every place tried and how to provide NCCL when none works.
const NcclLibrary& ncclLibrary();

// The same without throwing: null, and `why` filled, when NCCL cannot be loaded.
const NcclLibrary* tryNcclLibrary(std::string* why = nullptr);

}  // namespace cerar
