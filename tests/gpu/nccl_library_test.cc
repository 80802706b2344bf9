// NCCL loaded at run time (ops/transport/nccl_library.h): found without a device, from the
// search folders before the loader's path; a missing one is a clear error, not a failed import
// (that path is run by scripts/wheel-env.sh, with the libraries hidden).
#include <gtest/gtest.h>

#include <string>

#include "ops/transport/nccl_library.h"

namespace cerar {
namespace {

TEST(NcclLibrary, LoadsWithoutADeviceAndNamesItsFile) {
  std::string why;
  const NcclLibrary* lib = tryNcclLibrary(&why);
  if (!lib) {
    // No NCCL on this machine: the reason names the soname and the install.
    EXPECT_NE(why.find("libnccl.so.2"), std::string::npos) << why;
    EXPECT_NE(why.find("pip install nvidia-nccl"), std::string::npos) << why;
    GTEST_SKIP() << "no NCCL here: " << why;
  }
  EXPECT_GE(lib->version, 21900);
  EXPECT_NE(lib->path.find("libnccl.so"), std::string::npos) << lib->path;
  int version = 0;
  ASSERT_EQ(lib->getVersion(&version), ncclSuccess);
  EXPECT_EQ(version, lib->version);
  EXPECT_STRNE(lib->getErrorString(ncclInvalidArgument), "");
  // Loaded once: later search folders do not swap the library under a live communicator.
  setNcclSearchFolders({"/nonexistent"});
  EXPECT_EQ(&ncclLibrary(), lib);
}

}  // namespace
}  // namespace cerar
