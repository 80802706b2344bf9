// Small CUDA runtime helpers for host code that must not include CUDA headers.
#pragma once

#include <chrono>

namespace cerar::cuda {

// Throws cerar::Error("CUDA <what>: <reason>") unless `status` (a cudaError_t) is success.
void check(int status, const char* what);
// Waits for a recorded cudaEvent_t by polling; false when `timeout` passes first. A null event
// counts as complete. Throws cerar::Error on a CUDA error.
bool waitEvent(void* event, std::chrono::milliseconds timeout);
// Waits, as above, for all work enqueued on `stream` (a cudaStream_t) so far.
bool waitStream(void* stream, std::chrono::milliseconds timeout);

}  // namespace cerar::cuda
