# Finds the CUDA backend's parts: nvcc and the CUDA runtime (toolkit), cuBLAS, cuDNN and NCCL
# (CUBLAS_ROOT / CUDNN_ROOT / NCCL_ROOT, as variables or environment, point at pip wheels or
# other installs; cuBLAS otherwise comes from the toolkit).
# Sets TANDEM_HAS_CUDA and, when true, an interface target tandem::cuda_deps.
set(TANDEM_HAS_CUDA OFF)
if(TANDEM_CUDA_EMULATION)
  if(TANDEM_SANITIZE_THREAD)
    message(FATAL_ERROR "TANDEM_CUDA_EMULATION: its fibers are not annotated for ThreadSanitizer")
  endif()
  # The toolkit's headers (types, cuBLAS's, cuDNN's and NCCL's declarations) and tests/cuda_emu's
  # CPU stand-ins for the libraries behind them.
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  foreach(_header cuda_runtime.h cublas_v2.h cudnn.h nccl.h)
    string(MAKE_C_IDENTIFIER ${_header} _var)
    find_path(TANDEM_EMU_${_var}_DIR ${_header} HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} /usr/local/cuda
              PATH_SUFFIXES include)
    if(NOT TANDEM_EMU_${_var}_DIR)
      message(FATAL_ERROR "TANDEM_CUDA_EMULATION needs the CUDA toolkit's headers: ${_header} not found")
    endif()
    list(APPEND _tandem_emu_includes ${TANDEM_EMU_${_var}_DIR})
  endforeach()
  list(REMOVE_DUPLICATES _tandem_emu_includes)
  set(_emu ${CMAKE_CURRENT_SOURCE_DIR}/tests/cuda_emu)
  add_library(tandem_cuda_emu STATIC ${_emu}/runtime.cpp ${_emu}/cublas.cpp ${_emu}/cudnn.cpp
              ${_emu}/nccl.cpp)
  target_include_directories(tandem_cuda_emu SYSTEM PUBLIC ${_tandem_emu_includes})
  set_target_properties(tandem_cuda_emu PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # Its fiber switch returns onto another stack, which a CET shadow stack would refuse.
  set_property(SOURCE ${_emu}/runtime.cpp APPEND PROPERTY COMPILE_OPTIONS -fcf-protection=none)
  # The stand-ins are not what the sanitizer build tests, but they run every emulated kernel's
  # threads and every convolution: optimized (ASan still checks their reads of tandem's buffers),
  # without the fuzzer's coverage hooks, and their thread-locals read without __tls_get_addr
  # (libtandem.so is never dlopen'ed in this build). An emulated ResNet-20 step under ASan: 26 s
  # -> 6 s.
  set_property(SOURCE ${_emu}/runtime.cpp ${_emu}/cublas.cpp ${_emu}/cudnn.cpp ${_emu}/nccl.cpp
               APPEND PROPERTY COMPILE_OPTIONS -O2 -ftls-model=initial-exec
               $<$<BOOL:${TANDEM_FUZZ}>:-fno-sanitize=fuzzer-no-link>)
  add_library(tandem_cuda_deps INTERFACE)
  add_library(tandem::cuda_deps ALIAS tandem_cuda_deps)
  target_link_libraries(tandem_cuda_deps INTERFACE tandem_cuda_emu)
  # tandem_emulated_source(OUT CU): the .cu file CU (absolute) with its launches rewritten into
  # OUT, a C++ source compiled with emu.hpp force-included. Called in the folder of the target
  # that compiles OUT (generated files and source properties belong to their folder).
  function(tandem_emulated_source out cu)
    set(emu ${PROJECT_SOURCE_DIR}/tests/cuda_emu)
    add_custom_command(OUTPUT ${out}
      COMMAND ${Python3_EXECUTABLE} ${emu}/rewrite_launches.py ${cu} ${out}
      DEPENDS ${cu} ${emu}/rewrite_launches.py
      COMMENT "Rewriting ${cu}'s launches for the CUDA emulation" VERBATIM)
    set_property(SOURCE ${out} APPEND PROPERTY COMPILE_OPTIONS -include ${emu}/emu.hpp
                 -Wno-unknown-pragmas)
  endfunction()
  set(TANDEM_HAS_CUDA ON)
  message(STATUS "tandem: CUDA backend emulated on the CPU (tests/cuda_emu)")
  return()
endif()
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
    set(CMAKE_CUDA_ARCHITECTURES 80 90)  # Ampere (A100) and Hopper (H100/H200); override for others
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND _tandem_cuda_missing "CUDA toolkit")
  endif()
else()
  list(APPEND _tandem_cuda_missing "nvcc")
endif()

# cuBLAS (the toolkit's, or a pip wheel's under CUBLAS_ROOT), cuDNN and NCCL. A wheel ships
# lib<name>.so.<major> without the unversioned link, hence the versioned names; NAMES_PER_DIR
# looks through the hints in order for any of the names, so the library comes from the first
# root that has one, the root whose header find_path (same hints, same order) found.
foreach(_lib CUBLAS CUBLASLT CUDNN NCCL)
  string(TOLOWER ${_lib} _name)
  set(_root_var ${_lib})
  if(_lib STREQUAL "CUBLASLT")
    set(_root_var CUBLAS)
    set(_name cublasLt)
  endif()
  set(_hints ${${_root_var}_ROOT} $ENV{${_root_var}_ROOT} ${CUDAToolkit_LIBRARY_ROOT}
             ${CUDAToolkit_TARGET_DIR} /usr/local/cuda)
  set(_header ${_name}.h)
  if(_lib STREQUAL "CUBLAS")
    set(_header cublas_v2.h)
  elseif(_lib STREQUAL "CUBLASLT")
    set(_header cublasLt.h)
  endif()
  find_path(${_lib}_INCLUDE_DIR ${_header} HINTS ${_hints} PATH_SUFFIXES include)
  find_library(${_lib}_LIBRARY NAMES ${_name} lib${_name}.so.13 lib${_name}.so.12
               lib${_name}.so.9 lib${_name}.so.2 NAMES_PER_DIR
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
target_link_libraries(tandem_cuda_deps INTERFACE CUDA::cudart ${CUBLAS_LIBRARY}
                      ${CUBLASLT_LIBRARY} ${CUDNN_LIBRARY} ${NCCL_LIBRARY})
# cuDNN's and NCCL's headers first: the toolkit's folder (cuBLAS's, when the toolkit has it) may
# hold other copies of cudnn.h and nccl.h than those of the libraries found.
target_include_directories(tandem_cuda_deps INTERFACE ${CUDNN_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
# cuBLAS from a wheel: its include folder (nvidia/cu13/include) also holds the CUDA runtime's
# headers of the wheel's version, which must not shadow nvcc's own; so the toolkit's folders come
# first, both as system folders (searched after the -I ones above, in this order).
set(_tandem_cublas_dirs ${CUBLAS_INCLUDE_DIR} ${CUBLASLT_INCLUDE_DIR})
list(REMOVE_DUPLICATES _tandem_cublas_dirs)
list(REMOVE_ITEM _tandem_cublas_dirs ${CUDAToolkit_INCLUDE_DIRS})
if(_tandem_cublas_dirs)
  target_include_directories(tandem_cuda_deps SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS}
                             ${_tandem_cublas_dirs})
endif()
message(STATUS "tandem: CUDA backend on (cuBLAS ${CUBLAS_LIBRARY}, cuDNN ${CUDNN_LIBRARY}, "
               "NCCL ${NCCL_LIBRARY})")
