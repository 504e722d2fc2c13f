# Finds the CUDA backend's parts: nvcc, the CUDA runtime and cuBLAS (toolkit), cuDNN and NCCL
# (CUDNN_ROOT / NCCL_ROOT, as variables or environment, point at pip wheels or other installs).
# Sets TANDEM_HAS_CUDA and, when true, an interface target tandem::cuda_deps.
set(TANDEM_HAS_CUDA OFF)
if(TANDEM_WITH_CUDA STREQUAL "OFF")
  return()
endif()

if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)

set(_tandem_cuda_missing "")
if(CMAKE_CUDA_COMPILER)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper (H100/H200); override for other GPUs
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit)
  if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublas)
    list(APPEND _tandem_cuda_missing "CUDA toolkit with cuBLAS")
  endif()
else()
  list(APPEND _tandem_cuda_missing "nvcc")
endif()

foreach(_lib CUDNN NCCL)
  string(TOLOWER ${_lib} _name)
  set(_hints ${${_lib}_ROOT} $ENV{${_lib}_ROOT} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
  find_path(${_lib}_INCLUDE_DIR ${_name}.h HINTS ${_hints} PATH_SUFFIXES include)
  find_library(${_lib}_LIBRARY NAMES ${_name} lib${_name}.so.9 lib${_name}.so.2
               HINTS ${_hints} PATH_SUFFIXES lib lib64)
  if(NOT ${_lib}_INCLUDE_DIR OR NOT ${_lib}_LIBRARY)
    list(APPEND _tandem_cuda_missing ${_name})
  endif()
endforeach()

if(_tandem_cuda_missing)
  if(TANDEM_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TANDEM_WITH_CUDA=ON but not found: ${_tandem_cuda_missing}")
  endif()
  message(STATUS "tandem: CUDA backend off (not found: ${_tandem_cuda_missing})")
  return()
endif()

set(TANDEM_HAS_CUDA ON)
add_library(tandem_cuda_deps INTERFACE)
add_library(tandem::cuda_deps ALIAS tandem_cuda_deps)
# The runtime API only: linking libcuda (the driver stub) would stop the program from starting
# on machines without a driver.
target_link_libraries(tandem_cuda_deps INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt
                      ${CUDNN_LIBRARY} ${NCCL_LIBRARY})
target_include_directories(tandem_cuda_deps INTERFACE ${CUDNN_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
message(STATUS "tandem: CUDA backend on (cuDNN ${CUDNN_LIBRARY}, NCCL ${NCCL_LIBRARY})")
