# Checks that every #include in the library points down its layers (CMakeLists.txt
# lists them): a file may include project headers of its own layer or of a layer
# below, never above. Run at build time (target ember_layer_check) and by CTest.
#   cmake -DROOT=<source dir> -P tools/check_layers.cmake
# Exits with an error naming every offending file, line and include.
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()

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

set(names "core/base" "core/memory" "cuda" "core" "optim" "nn" "parallel" "ember.h")
file(GLOB_RECURSE files RELATIVE ${ROOT}
  ${ROOT}/core/*.h ${ROOT}/core/*.cpp ${ROOT}/core/*.cu ${ROOT}/core/*.cuh
  ${ROOT}/cuda/*.h ${ROOT}/cuda/*.cpp ${ROOT}/cuda/*.cu ${ROOT}/cuda/*.cuh
  ${ROOT}/optim/*.h ${ROOT}/optim/*.cpp ${ROOT}/nn/*.h ${ROOT}/nn/*.cpp
  ${ROOT}/parallel/*.h ${ROOT}/parallel/*.cpp)
set(bad "")
set(count 0)
foreach(f IN LISTS files)
  layer_of("${f}" mine)
  if(mine LESS 0)
    continue()
  endif()
  file(STRINGS ${ROOT}/${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    layer_of("${inc}" theirs)
    math(EXPR count "${count} + 1")
    if(theirs GREATER mine)
      list(GET names ${mine} mine_name)
      list(GET names ${theirs} their_name)
      string(APPEND bad "\n  ${f} (${mine_name}) includes \"${inc}\" (${their_name}, a layer above)")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "ember: includes that point up the layers "
    "(core/base <- core/memory <- cuda <- core <- optim <- nn <- parallel):${bad}")
endif()
message(STATUS "ember: ${count} includes checked, all point down the layers")
