# CUDA codec kernels and the NCCL transport: built when the toolkit and NCCL are found.
# Included after the `cerar` target exists. Without CUDA (or with -DCERAR_WITH_CUDA=OFF)
# nothing below builds and the engine is unaffected.
set(CERAR_HAVE_CUDA OFF)
if(CERAR_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    # Only NCCL's header: the library is loaded at run time (ops/transport/nccl_library.h).
    if(NCCL_INCLUDE_DIR)
      set(CERAR_HAVE_CUDA ON)
    endif()
  endif()
endif()
message(STATUS "cerar: CUDA/NCCL parts ${CERAR_HAVE_CUDA}")

if(CERAR_HAVE_CUDA)
  # An H200 (sm_90); `native` fails on machines without a GPU.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  # C++17 in the kernels: CMake before 3.26 cannot ask nvcc for C++20.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)

  # ops' device side (kernels, NCCL and staged transports, the device executor) and core's
  # (the runtime's device operations), each in its own layer as the host libraries are.
  set(_cerar_cuda_dir ${PROJECT_SOURCE_DIR}/ops/codec/cuda)
  add_library(cerar_ops_cuda STATIC
    ${_cerar_cuda_dir}/codec_cuda.cu ${_cerar_cuda_dir}/cuda_util.cc
    ${PROJECT_SOURCE_DIR}/ops/device_executor.cc
    ${PROJECT_SOURCE_DIR}/ops/transport/nccl.cc ${PROJECT_SOURCE_DIR}/ops/transport/nccl_library.cc
    ${PROJECT_SOURCE_DIR}/ops/transport/staged.cc
    ${PROJECT_SOURCE_DIR}/ops/transport/device_select.cc)
  target_include_directories(cerar_ops_cuda PUBLIC ${NCCL_INCLUDE_DIR})
  # The CUDA runtime linked in (it loads the driver, libcuda.so.1, only when first used) and NCCL
  # loaded at run time (ops/transport/nccl_library.h): the extension then imports on machines
  # without CUDA, and finds NCCL where the nvidia-* wheels or the system put it.
  target_link_libraries(cerar_ops_cuda PUBLIC cerar_ops CUDA::cudart_static ${CMAKE_DL_LIBS})
  add_library(cerar_cuda STATIC ${PROJECT_SOURCE_DIR}/core/device/cuda/cuda_device_ops.cc)
  target_link_libraries(cerar_cuda PUBLIC cerar cerar_ops_cuda)
  # The directory's compile options are for the host compiler: hand them to nvcc through
  # -Xcompiler. No FMA contraction on the device either (cerar-protocol.md).
  get_target_property(_cerar_options cerar_ops_cuda COMPILE_OPTIONS)
  set(_cerar_wrapped)
  foreach(_option IN LISTS _cerar_options)
    list(APPEND _cerar_wrapped "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${_option}>"
                               "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_option}>")
  endforeach()
  set_property(TARGET cerar_ops_cuda PROPERTY COMPILE_OPTIONS
    ${_cerar_wrapped} "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>")

  if(CERAR_BUILD_TESTS)
    enable_testing()
    add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu ${PROJECT_BINARY_DIR}/tests/gpu)
  endif()
endif()
