// Runs the registered tests (optionally those whose "Suite.Name" contains argv[1]).
// Exit status: 1 when a test failed; 77 when none failed but there is no CUDA device (the
// device tests skipped themselves); 0 otherwise.
#include <gtest/gtest.h>

#include <string>

#include "ops/codec/cuda/codec_cuda.h"

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  int failed = 0, skipped = 0, passed = 0;
  for (const auto& test : minitest::registry()) {
    const std::string name = std::string(test.suite) + "." + test.name;
    if (name.find(filter) == std::string::npos) continue;
    minitest::state() = {};
    std::cout << "[ RUN      ] " << name << std::endl;
    try {
      test.body();
    } catch (const std::exception& e) {
      minitest::Failure{__FILE__, __LINE__, "uncaught exception"} = minitest::Message()
                                                                     << e.what();
    }
    if (minitest::state().failures > 0) {
      ++failed;
      std::cout << "[  FAILED  ] " << name << std::endl;
    } else if (minitest::state().skipped) {
      ++skipped;
      std::cout << "[  SKIPPED ] " << name << std::endl;
    } else {
      ++passed;
      std::cout << "[       OK ] " << name << std::endl;
    }
  }
  std::cout << passed << " passed, " << skipped << " skipped, " << failed << " failed"
            << std::endl;
  if (failed > 0) return 1;
  std::string why;
  if (cerar::cuda::deviceCount(&why) == 0) {
    std::cout << "no CUDA device: " << why << " (device tests skipped)" << std::endl;
    return 77;
  }
  return 0;
}
