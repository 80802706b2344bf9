// Horovod's environment variables that cerar does not read (those it reads are aliases in the
// settings table, core/config/settings.cc).
#include "core/config/variable_names.h"

namespace cerar {

const std::vector<IgnoredVariable>& horovodIgnoredVariables() {
  static const std::vector<IgnoredVariable> names{
      {"HOROVOD_HIERARCHICAL_ALLGATHER", "hierarchical all-gather is not built"},
      {"HOROVOD_TORUS_ALLREDUCE", "torus all-reduce is not built"},
      {"HOROVOD_NUM_NCCL_STREAMS", "the NCCL transport's streams are not configurable"},
      {"HOROVOD_BATCH_D2D_MEMCOPIES", "fusion buffer copies have no batching switch"},
      {"HOROVOD_MPI_THREADS_DISABLE", "cerar does not use MPI"},
      {"HOROVOD_ENABLE_XLA_OPS", "no XLA operations are built"},
      {"HOROVOD_ENABLE_ASYNC_COMPLETION", "no TensorFlow operations are built"},
      {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", "Adasum runs over Gloo here, without MPI chunks"},
      {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
       "the autotuner has no Bayesian optimisation (docs/autotune.md)"},
      {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
       "the autotuner has no Bayesian optimisation (docs/autotune.md)"},
      {"HOROVOD_DISABLE_GROUP_FUSION", "there is no switch for fusing grouped collectives"},
      {"HOROVOD_THREAD_AFFINITY", "the background thread is not pinned to cores"},
      {"HOROVOD_DISABLE_NVTX_RANGES", "no NVTX ranges are emitted"},
      {"HOROVOD_LOG_HIDE_TIME", "log lines carry no time"},
      {"HOROVOD_CCL_BGT_AFFINITY", "cerar does not use oneCCL"},
      {"HOROVOD_ELASTIC_TIMEOUT",
       "the elastic driver sets its workers' limit from cerarrun's --elastic-timeout"},
  };
  return names;
}

const std::vector<const char*>& horovodQuietVariables() {
  static const std::vector<const char*> names{
      // Build-time.
      "HOROVOD_WITH_*", "HOROVOD_WITHOUT_*", "HOROVOD_GPU", "HOROVOD_GPU_OPERATIONS",
      "HOROVOD_GPU_ALLREDUCE", "HOROVOD_GPU_ALLGATHER", "HOROVOD_GPU_BROADCAST",
      "HOROVOD_GPU_ALLTOALL", "HOROVOD_GPU_REDUCESCATTER", "HOROVOD_ALLOW_MIXED_GPU_IMPL",
      "HOROVOD_CUDA_HOME", "HOROVOD_CUDA_INCLUDE", "HOROVOD_CUDA_LIB", "HOROVOD_NCCL_HOME",
      "HOROVOD_NCCL_INCLUDE", "HOROVOD_NCCL_LIB", "HOROVOD_NCCL_LINK", "HOROVOD_ROCM_HOME",
      "HOROVOD_BUILD_ARCH_FLAGS", "HOROVOD_BUILD_CUDA_CC_LIST", "HOROVOD_CMAKE",
      "HOROVOD_DEBUG", "HOROVOD_MPICXX_SHOW",
      // Set by horovodrun for its workers.
      "HOROVOD_HOSTNAME", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS", "HOROVOD_RANK",
      "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
      "HOROVOD_CROSS_SIZE", "HOROVOD_ELASTIC", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
      "HOROVOD_GLOO_RENDEZVOUS_PORT",
      // horovodrun's own limit (cerarrun's --start-timeout sets the ranks' rendezvous limit).
      "HOROVOD_START_TIMEOUT",
  };
  return names;
}

}  // namespace cerar
