# Bad input to tandem-resnet that needs files prepared first, one CASE per ctest entry: damaged
# datasets, a checkpoint from another model, a damaged checkpoint, a trace it cannot write. Each
# must exit non-zero with one clear line and leave an existing checkpoint untouched.
# cmake -DEXE=... -DWORK_DIR=... -DCASE=... [-DFASHION_DIR=...] [-DARGS=... -DPATTERN=...]
#       -P example_cases.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# Runs the example; fails unless it exits non-zero with stderr matching `pattern`.
function(expect_failure pattern)
  execute_process(COMMAND ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected a failure, the example succeeded:\n${out}")
  endif()
  if(NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "stderr does not match '${pattern}':\n${err}")
  endif()
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "expected one line on stderr, got ${count}:\n${err}")
  endif()
  message(STATUS "rejected as expected: ${err}")
endfunction()

function(run_ok)
  execute_process(COMMAND ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "the example failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(small --dataset synthetic --synthetic-size 64 --batch-size 16 --workers 1
          --checkpoint-dir ${WORK_DIR}/ckpt)
set(ckpt ${WORK_DIR}/ckpt/resnet20-synthetic.safetensors)

if(CASE STREQUAL "reject")
  # Flags alone: ARGS (a ;-list) must be refused with PATTERN.
  expect_failure("${PATTERN}" ${ARGS})
elseif(CASE STREQUAL "truncated_idx")
  # A gzip stream cut in the middle.
  file(MAKE_DIRECTORY ${WORK_DIR}/fmnist)
  file(GLOB files ${FASHION_DIR}/*)
  file(COPY ${files} DESTINATION ${WORK_DIR}/fmnist)
  file(REMOVE ${WORK_DIR}/fmnist/train-labels-idx1-ubyte.gz)
  execute_process(COMMAND head -c 2000 ${FASHION_DIR}/train-labels-idx1-ubyte.gz
                  OUTPUT_FILE ${WORK_DIR}/fmnist/train-labels-idx1-ubyte.gz)
  expect_failure("train-labels-idx1-ubyte.gz: (file is truncated|corrupt gzip)"
                 --data-dir ${WORK_DIR}/fmnist)
elseif(CASE STREQUAL "corrupt_cifar")
  file(MAKE_DIRECTORY ${WORK_DIR}/cifar)
  file(WRITE ${WORK_DIR}/cifar/test_batch.bin "not a CIFAR batch")
  foreach(i 1 2 3 4 5)
    file(WRITE ${WORK_DIR}/cifar/data_batch_${i}.bin "not a CIFAR batch")
  endforeach()
  expect_failure("data_batch_1.bin is truncated or not a CIFAR-10 batch: 17 bytes"
                 --dataset cifar10 --data-dir ${WORK_DIR}/cifar)
elseif(CASE STREQUAL "checkpoint_other_model")
  run_ok(${small} --epochs 1)
  file(SHA256 ${ckpt} before)
  expect_failure("is from a run with model = resnet20, this run has model = resnet32"
                 ${small} --epochs 1 --model resnet32 --resume ${ckpt})
  file(SHA256 ${ckpt} after)
  if(NOT before STREQUAL after)
    message(FATAL_ERROR "the failed run changed the existing checkpoint")
  endif()
elseif(CASE STREQUAL "damaged_checkpoint")
  run_ok(${small} --epochs 1)
  execute_process(COMMAND head -c 30000 ${ckpt} OUTPUT_FILE ${WORK_DIR}/damaged.safetensors)
  expect_failure("damaged.safetensors: not a valid safetensors file: .*\\(truncated\\?\\)"
                 ${small} --epochs 1 --resume ${WORK_DIR}/damaged.safetensors)
  expect_failure("cannot read ${WORK_DIR}/missing.safetensors"
                 ${small} --epochs 1 --resume ${WORK_DIR}/missing.safetensors)
elseif(CASE STREQUAL "resume")
  # Stopped mid-epoch by --max-steps and resumed, a run ends with the same checkpoint, byte for
  # byte, as the same run uninterrupted (4 steps per epoch; the stop is at epoch 2, batch 2).
  # ARGS: more flags for all three runs (--ranks 2 --precision f16: two ranks and loss scaling).
  list(APPEND small ${ARGS})
  run_ok(${small} --epochs 2 --checkpoint-dir ${WORK_DIR}/whole --metrics ${WORK_DIR}/metrics.jsonl)
  file(READ ${WORK_DIR}/metrics.jsonl metrics)
  foreach(key epoch train_loss test_acc img_per_s seconds)
    if(NOT metrics MATCHES "\"${key}\": ")
      message(FATAL_ERROR "metrics line lacks ${key}: ${metrics}")
    endif()
  endforeach()
  run_ok(${small} --epochs 2 --max-steps 6)
  run_ok(${small} --epochs 2 --resume ${ckpt})
  if(NOT run_output MATCHES "resumed from .* at epoch 2, step 6.*done: resnet20 on synthetic, 8 steps")
    message(FATAL_ERROR "unexpected output of the resumed run:\n${run_output}")
  endif()
  file(SHA256 ${ckpt} resumed)
  file(SHA256 ${WORK_DIR}/whole/resnet20-synthetic.safetensors whole)
  if(NOT resumed STREQUAL whole)
    message(FATAL_ERROR "the resumed run's checkpoint differs from the uninterrupted run's")
  endif()
elseif(CASE STREQUAL "emulated_gpus_match_cpu")
  # The example on every GPU (two emulated ones, tests/cuda_emu: one rank each through the nccl
  # backend, the GPU data path) and on two CPU ranks: the same training, so the same epoch loss
  # up to the summation orders of cuDNN's stand-in and the CPU's kernels.
  set(args --dataset synthetic --synthetic-size 16 --batch-size 4 --max-steps 2 --lr 0.01
           --workers 1)
  run_ok(${args} --checkpoint-dir ${WORK_DIR}/gpu)
  set(gpu "${run_output}")
  run_ok(${args} --device cpu --ranks 2 --checkpoint-dir ${WORK_DIR}/cpu)
  set(cpu "${run_output}")
  if(NOT gpu MATCHES "on 2 GPU\\(s\\)")
    message(FATAL_ERROR "the example did not take both emulated GPUs:\n${gpu}")
  endif()
  foreach(run gpu cpu)
    if(NOT ${run} MATCHES "epoch 1: train loss ([1-9][0-9]*)\\.([0-9][0-9][0-9][0-9])")
      message(FATAL_ERROR "no epoch loss in the ${run} run's output:\n${${run}}")
    endif()
    set(${run}_loss "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")  # in units of 1e-4
  endforeach()
  math(EXPR diff "${gpu_loss} - ${cpu_loss}")
  if(diff GREATER 5 OR diff LESS -5)
    message(FATAL_ERROR "epoch loss on the GPUs ${gpu_loss}e-4, on the CPU ${cpu_loss}e-4")
  endif()
  message(STATUS "epoch loss on the GPUs ${gpu_loss}e-4, on the CPU ${cpu_loss}e-4")
elseif(CASE STREQUAL "trace_unwritable")
  # A --trace path it cannot write (below a file) fails before training (it trained, then lost
  # the trace).
  file(WRITE ${WORK_DIR}/file "")
  expect_failure("cannot write --trace file ${WORK_DIR}/file/trace.json" ${small} --max-steps 4
                 --trace ${WORK_DIR}/file/trace.json)
  file(GLOB written ${WORK_DIR}/ckpt/*)
  if(written)
    message(FATAL_ERROR "it trained before failing: ${written}")
  endif()
else()
  message(FATAL_ERROR "unknown CASE ${CASE}")
endif()
