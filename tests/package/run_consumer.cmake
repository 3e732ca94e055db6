# CTest's package test: installs the build tree into a fresh temporary prefix,
# configures and builds tests/package/consumer against it (find_package(ember)),
# and runs the program. Any failing step fails the test.
#   cmake -DBUILD_DIR=<ember build> -DSOURCE_DIR=<ember source> -DWORK_DIR=<scratch>
#         [-DGENERATOR=Ninja] [-DCXX=<compiler>] [-DLAUNCHER=<ccache>] -P run_consumer.cmake
# LAUNCHER: the build's compiler launcher (ccache, when it has one), so that the
# consumer's compile of ember's headers (3 of the test's 6 s on 2 cores) is cached
# between runs; a change to any installed header still misses.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer: pass -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "package test: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/ember/ember.h include/ember/nn/nn.h lib/cmake/ember/emberConfig.cmake
          lib/cmake/ember/emberConfigVersion.cmake lib/cmake/ember/emberTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "package test: the install lacks ${f}")
  endif()
endforeach()

set(configure_args -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
if(CXX)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX})
endif()
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
step("configure the consumer (find_package(ember))" ${CMAKE_COMMAND} ${configure_args})
step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step("run the consumer" ${WORK_DIR}/build/consumer)
message(STATUS "${step_output}")
file(REMOVE_RECURSE ${WORK_DIR})
