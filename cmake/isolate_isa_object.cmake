# Joins the objects of one instruction set's CPU kernels into one object whose functions are all
# local, so that nothing compiled for AVX2/AVX-512 can be chosen by the linker for a call from
# baseline code. Inline functions and template instances (Eigen's, the standard library's,
# tandem's headers') are emitted as COMDAT groups in every object that uses them, and the linker
# keeps one copy per name: without this step, a baseline caller could end up running the copy
# compiled for AVX-512. `ld -r --force-group-allocation` dissolves the groups (merging copies
# within this instruction set only), and objcopy makes every defined function local.
# Data stays global: the statics of inline functions (GNU unique symbols, which were COMDAT)
# must stay one object for the whole library, so they become weak, and the baseline copy wins.
#   cmake -DLD=ld -DNM=nm -DOBJCOPY=objcopy -DOUTPUT=out.o "-DINPUTS=a.o;b.o" -P isolate_isa_object.cmake
foreach(var LD NM OBJCOPY OUTPUT INPUTS)
  if(NOT ${var})
    message(FATAL_ERROR "isolate_isa_object.cmake: ${var} not set")
  endif()
endforeach()

set(joined ${OUTPUT}.joined.o)
execute_process(COMMAND ${LD} -r --force-group-allocation -o ${joined} ${INPUTS}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${LD} -r failed (${rc})")
endif()

# nm -P: "name type value size". T/t text, W/w weak function; V weak object (vtables, type_info:
# their copies need not be one object, and a vtable points at functions of this ISA).
execute_process(COMMAND ${NM} --defined-only -P ${joined} OUTPUT_VARIABLE symbols
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed (${rc})")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${symbols}")
set(local "")
set(weak "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ ]+) [TWV] ")
    string(APPEND local "${CMAKE_MATCH_1}\n")
  elseif(line MATCHES "^([^ ]+) u ")
    string(APPEND weak "${CMAKE_MATCH_1}\n")
  endif()
endforeach()
file(WRITE ${OUTPUT}.localize "${local}")
file(WRITE ${OUTPUT}.weaken "${weak}")
execute_process(COMMAND ${OBJCOPY} --localize-symbols=${OUTPUT}.localize
                        --weaken-symbols=${OUTPUT}.weaken ${joined} ${OUTPUT}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJCOPY} failed (${rc})")
endif()
file(REMOVE ${joined})
