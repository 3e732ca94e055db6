# The layer check (CMakeLists.txt lists the layers). Run at build time (target
# ember_layer_check) and by CTest:
#   cmake -DROOT=<source dir> -P tools/check_layers.cmake
# It fails, naming every offending file and include or name, on:
# 1. an #include "..." that points up the layers: a file may include project
#    headers of its own layer or of a layer below, never above;
# 2. a CUDA Toolkit header included in angle brackets outside cuda/ (<cuda_runtime.h>,
#    <cublasLt.h>, <cub/...>, ...): the layers below cuda/ make no CUDA call, and the
#    ones above reach CUDA through cuda/'s headers. NCCL's <nccl.h> belongs to
#    parallel/ (and cuda/) alone;
# 3. a `cuda::` name used (not in a comment or a string) outside cuda/, the device
#    registrations (core/kernels/cuda_device.cpp, which lists the CUDA kernel files'
#    registrations, and core/kernels/meta_device.cpp, which mirrors CUDA's
#    decisions) and parallel/ (NCCL on CUDA streams and events), except in the files
#    of cuda_name_exceptions below, each with its reason;
# 4. an internal header included outside its folder: a header whose first line reads
#    "// Internal to <folder>: ..." (core/ops/layouts.h, core/kernels/registration.h)
#    may be included only by files in <folder>.
# tests/layers holds a planted tree for each rule that this check must reject.
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()

# Files that use cuda:: names outside cuda/, the device registrations and parallel/,
# and why. Device services (core/device_services.h: device counts, pinned staging)
# go through the device's table, so the rule catches any new direct call.
set(cuda_name_exceptions
  core/meta.cpp          # cuBLAS/cuBLASLt workspace sizes the meta device predicts
)

# Layer of a project path ("core/base/dtype.h"), lowest first; -1 if not layered.
function(layer_of path out)
  if(path MATCHES "^core/base/")
    set(n 0)
  elseif(path MATCHES "^core/memory/")
    set(n 1)
  elseif(path MATCHES "^cuda/")
    set(n 2)
  elseif(path MATCHES "^core/")
    set(n 3)
  elseif(path MATCHES "^optim/")
    set(n 4)
  elseif(path MATCHES "^nn/")
    set(n 5)
  elseif(path MATCHES "^parallel/")
    set(n 6)
  elseif(path MATCHES "^ember\\.h$")
    set(n 7)
  else()
    set(n -1)
  endif()
  set(${out} ${n} PARENT_SCOPE)
endfunction()

set(cuda_header_regex
  "^(cuda[A-Za-z0-9_]*\\.h|cublas[A-Za-z0-9_]*\\.h|cu(rand|fft|sparse|solver|dnn|pti)[A-Za-z0-9_]*\\.h|(cub|thrust|cuda|nvtx3|cooperative_groups|crt)/.*|cooperative_groups\\.h|(driver|vector|library|surface|texture)_types\\.h|nvrtc\\.h|nvml\\.h|nvtx[A-Za-z0-9_]*\\.h)$")

set(names "core/base" "core/memory" "cuda" "core" "optim" "nn" "parallel" "ember.h")
file(GLOB_RECURSE files RELATIVE ${ROOT}
  ${ROOT}/core/*.h ${ROOT}/core/*.cpp ${ROOT}/core/*.cu ${ROOT}/core/*.cuh
  ${ROOT}/cuda/*.h ${ROOT}/cuda/*.cpp ${ROOT}/cuda/*.cu ${ROOT}/cuda/*.cuh
  ${ROOT}/optim/*.h ${ROOT}/optim/*.cpp ${ROOT}/nn/*.h ${ROOT}/nn/*.cpp
  ${ROOT}/parallel/*.h ${ROOT}/parallel/*.cpp ${ROOT}/ember.h)
set(bad "")
set(count 0)
foreach(f IN LISTS files)
  layer_of("${f}" mine)
  if(mine LESS 0)
    continue()
  endif()
  list(GET names ${mine} mine_name)

  # 1 and 4: project includes.
  file(STRINGS ${ROOT}/${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    layer_of("${inc}" theirs)
    math(EXPR count "${count} + 1")
    if(theirs GREATER mine)
      list(GET names ${theirs} their_name)
      string(APPEND bad "\n  ${f} (${mine_name}) includes \"${inc}\" (${their_name}, a layer above)")
    endif()
    if(NOT DEFINED internal_${inc})
      set(internal_${inc} "")
      if(EXISTS ${ROOT}/${inc})
        file(STRINGS ${ROOT}/${inc} first LIMIT_COUNT 1)
        if(first MATCHES "^// Internal to ([a-z_]+(/[a-z_]+)*):")
          set(internal_${inc} "${CMAKE_MATCH_1}")
        endif()
      endif()
    endif()
    set(folder "${internal_${inc}}")
    if(folder AND NOT f MATCHES "^${folder}/")
      string(APPEND bad "\n  ${f} includes \"${inc}\", a header internal to ${folder}/")
    endif()
  endforeach()

  # 2: CUDA headers in angle brackets.
  file(STRINGS ${ROOT}/${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*<")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*<([^>]+)>.*" "\\1" inc "${line}")
    math(EXPR count "${count} + 1")
    if(mine EQUAL 2)
      continue()
    endif()
    if(inc MATCHES "${cuda_header_regex}")
      string(APPEND bad "\n  ${f} (${mine_name}) includes <${inc}>, a CUDA header outside cuda/")
    elseif(inc STREQUAL "nccl.h" AND NOT mine EQUAL 6)
      string(APPEND bad "\n  ${f} (${mine_name}) includes <nccl.h> outside cuda/ and parallel/")
    endif()
  endforeach()

  # 3: cuda:: names outside cuda/, the device registrations and parallel/.
  if(mine EQUAL 2 OR mine EQUAL 6 OR f MATCHES "^core/kernels/(cuda_device|meta_device)\\.cpp$")
    continue()
  endif()
  list(FIND cuda_name_exceptions "${f}" excepted)
  if(excepted GREATER -1)
    continue()
  endif()
  file(STRINGS ${ROOT}/${f} lines REGEX "cuda::")
  foreach(line IN LISTS lines)
    # Not in a string literal, a // comment or a /* */ comment's line.
    string(REGEX REPLACE "\"([^\"\\\\]|\\\\.)*\"" "\"\"" code "${line}")
    string(REGEX REPLACE "//.*$" "" code "${code}")
    string(REGEX REPLACE "/\\*.*\\*/" "" code "${code}")
    if(code MATCHES "^[ \t]*\\*" OR code MATCHES "^[ \t]*/\\*")
      continue()
    endif()
    if(code MATCHES "(^|[^A-Za-z0-9_])cuda::[A-Za-z_]")
      string(STRIP "${line}" shown)
      string(APPEND bad "\n  ${f} (${mine_name}) uses a cuda:: name outside cuda/ and the device "
                        "registrations: ${shown}")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "ember: the layer check failed (includes point down the layers "
    "core/base <- core/memory <- cuda <- core <- optim <- nn <- parallel; no CUDA header "
    "or cuda:: name outside cuda/ and the device registrations; internal headers stay in "
    "their folder; tools/check_layers.cmake):${bad}")
endif()
message(STATUS "ember: ${count} includes checked: all point down the layers, no CUDA header "
               "outside cuda/, no cuda:: name outside cuda/ and the device registrations, no "
               "internal header outside its folder")
