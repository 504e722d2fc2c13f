# Every public header under FOLDER compiles as the only include of a translation unit (#pragma
# once, includes what it uses); the headers device code shares are compiled by nvcc too. One
# compiler process per header, syntax only. Fails naming each header that does not compile, with
# its first error.
# With -DTOGETHER=ON the headers compile in one translation unit instead: for the umbrella
# headers, where one alone costs a parse of most of the library. That stands for each alone
# where each is only includes (checked here) of headers that the folders' runs check alone; the
# one that includes all the others (tandem.hpp) may hold more.
#   cmake -DCXX=g++ -DINCLUDE_DIR=<repo>/include -DEIGEN_DIR=/usr/include/eigen3
#         -DFOLDER=tandem/core [-DRECURSE=OFF] [-DTOGETHER=ON] -DWORK_DIR=<scratch> [-DNVCC=nvcc]
#         -P check_headers.cmake

cmake_minimum_required(VERSION 3.25)  # for IN_LIST

# The headers .cu files include for device code (functors.hpp brings macros.hpp and math.hpp).
set(NVCC_HEADERS tandem/core/dtype_dispatch.hpp tandem/kernels/functors.hpp)

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
if(DEFINED RECURSE AND NOT RECURSE)
  file(GLOB headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/${FOLDER}/*.hpp)
else()
  file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/${FOLDER}/*.hpp)
endif()
list(SORT headers)

set(failures "")
# Compiles `source` (which includes `header`) with `compiler` and `flags`; records the failure.
function(check_one compiler header source)
  execute_process(COMMAND ${compiler} ${ARGN} -I${INCLUDE_DIR} -I${EIGEN_DIR} ${source}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REGEX MATCH "[^\n]*error[^\n]*" first "${out}")
    if(NOT first)
      string(REGEX MATCH "[^\n]+" first "${out}")
    endif()
    get_filename_component(name ${compiler} NAME)
    set(failures "${failures}\n  ${header} (${name}): ${first}" PARENT_SCOPE)
  endif()
endfunction()

list(LENGTH headers count)
if(TOGETHER)
  set(together "")
  math(EXPR others "${count} - 1")
  foreach(header IN LISTS headers)
    string(APPEND together "#include \"${header}\"\n")
    file(STRINGS ${INCLUDE_DIR}/${header} lines REGEX "^[ \t]*[^ \t/#]")
    file(STRINGS ${INCLUDE_DIR}/${header} includes REGEX "^#include \"tandem/")
    list(LENGTH includes named)
    if(lines AND NOT named EQUAL others)
      set(failures "${failures}\n  ${header}: holds more than includes, yet does not include all the others")
    endif()
  endforeach()
  file(WRITE ${WORK_DIR}/together.cpp "${together}")
  check_one(${CXX} "${FOLDER}/*.hpp" ${WORK_DIR}/together.cpp -std=c++17 -fsyntax-only)
  if(failures)
    message(FATAL_ERROR "public headers that do not compile together:${failures}")
  endif()
  message(STATUS "${count} public headers in ${FOLDER} compile together")
  return()
endif()
foreach(header IN LISTS headers)
  string(MAKE_C_IDENTIFIER ${header} stem)
  file(WRITE ${WORK_DIR}/${stem}.cpp "#include \"${header}\"\n")
  check_one(${CXX} ${header} ${WORK_DIR}/${stem}.cpp -std=c++17 -fsyntax-only)
  if(NVCC AND header IN_LIST NVCC_HEADERS)
    file(WRITE ${WORK_DIR}/${stem}.cu "#include \"${header}\"\n")
    check_one(${NVCC} ${header} ${WORK_DIR}/${stem}.cu -std=c++17 --expt-relaxed-constexpr
              -diag-suppress=20012 -c -o ${WORK_DIR}/${stem}.o)
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "public headers that do not compile on their own:${failures}")
endif()
message(STATUS "${count} public headers in ${FOLDER} compile on their own")
