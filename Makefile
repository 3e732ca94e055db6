# ember's thin front door (as Neovim's Makefile is): each target installs what is
# missing, configures, builds with all cores and runs. The real build is CMake.
#
#   make demo           build and run the seed training example (CUDA if present, else CPU)
#   make test           build everything and run every test (CUDA tests skip without a GPU)
#   make bench          build in Release and run the benchmark binaries (needs a GPU)
#   make compare        benchmarks/compare.sh: every benchmark and its PyTorch peer, one table
#   make test-sanitize  the CPU tests built with ASan + UBSan + LSan (build-sanitize)
#   make test-tsan      the CPU tests built with ThreadSanitizer (build-tsan)
#   make gpu-sanitize   every CUDA suite under compute-sanitizer, the planted bugs, the
#                       cuBLASLt probe (needs a GPU; tools/gpu_sanitize.sh)
#   make test-fuzz      libFuzzer targets (clang), a bounded time each
#   make format-check  every C++/CUDA file against .clang-format (clang-format 14); make format fixes
#   make docs           the API reference from the headers and the guides of docs/ (Doxygen), build/docs/html;
#                       fails on any Doxygen warning
#   make clean

BUILD_DIR    ?= build
BUILD_TYPE   ?= RelWithDebInfo
JOBS         ?= $(shell nproc)
CMAKE_FLAGS  ?=
export PATH  := $(PATH):/usr/local/cuda/bin
# Let build trees share ccache entries (paths inside objects are not hashed).
export CCACHE_NOHASHDIR := 1

# CI builds with warnings as errors.
ifneq ($(CI),)
  CMAKE_FLAGS += -DEMBER_WARNINGS_AS_ERRORS=ON
endif

.PHONY: all deps configure build demo test bench compare clean test-sanitize test-tsan gpu-sanitize test-fuzz docs format format-check

all: build

deps:
	@tools/ensure_deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null \
	  || cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	@echo "ember: building in $(BUILD_DIR) with $(JOBS) jobs"
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@$(BUILD_DIR)/examples/seed_train

# ctest -O keeps its console log (which tests failed, crashed, timed out or did
# not run) for tools/test_summary.sh, which prints the closing count.
CTEST_ARGS = --output-on-failure -j $(JOBS) -O Testing/Temporary/LastTestConsole.log
test: build
	@(cd $(BUILD_DIR) && ctest $(CTEST_ARGS)); status=$$?; \
	  tools/test_summary.sh $(BUILD_DIR); summary=$$?; [ $$status -eq 0 ] && [ $$summary -eq 0 ]

bench: BUILD_DIR = build-release
bench: BUILD_TYPE = Release
bench: build
	@for b in $(BUILD_DIR)/benchmarks/bench_*; do echo "== $$b"; $$b || exit 1; done

compare: deps
	@benchmarks/compare.sh

# The sanitizer build: only the library and the test binaries (no examples, no
# benchmarks), the same build type and CUDA flags as `build`, so ccache serves
# the nvcc objects from the normal build. The run-time options and suppressions
# live in tools/sanitize_env.sh (sourced, so a developer can rerun one binary).
SANITIZE_DIR ?= build-sanitize
test-sanitize: deps
	@cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DEMBER_SANITIZE=ON \
	  -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCHMARKS=OFF $(CMAKE_FLAGS) >/dev/null \
	  || cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DEMBER_SANITIZE=ON \
	  -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCHMARKS=OFF $(CMAKE_FLAGS)
	@echo "ember: building the sanitizer build in $(SANITIZE_DIR) with $(JOBS) jobs"
	@cmake --build $(SANITIZE_DIR) -j $(JOBS)
	@. tools/sanitize_env.sh && (cd $(SANITIZE_DIR) && ctest $(CTEST_ARGS)); \
	  status=$$?; tools/test_summary.sh $(SANITIZE_DIR); summary=$$?; [ $$status -eq 0 ] && [ $$summary -eq 0 ]

# The ThreadSanitizer build: the CPU tests (no examples, no benchmarks) built with
# -fsanitize=thread in build-tsan, the MPI tests included (a bare MPI program runs
# clean under TSan here; OpenMPI itself is not instrumented, so only our side of it
# is checked). Options: tools/tsan_env.sh.
TSAN_DIR ?= build-tsan
test-tsan: deps
	@cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DEMBER_TSAN=ON \
	  -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCHMARKS=OFF $(CMAKE_FLAGS) >/dev/null \
	  || cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DEMBER_TSAN=ON \
	  -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCHMARKS=OFF $(CMAKE_FLAGS)
	@echo "ember: building the ThreadSanitizer build in $(TSAN_DIR) with $(JOBS) jobs"
	@cmake --build $(TSAN_DIR) -j $(JOBS)
	@. tools/tsan_env.sh && (cd $(TSAN_DIR) && ctest $(CTEST_ARGS)); \
	  status=$$?; tools/test_summary.sh $(TSAN_DIR); summary=$$?; [ $$status -eq 0 ] && [ $$summary -eq 0 ]

# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over the CUDA test
# cases of every test binary of the normal build; needs a GPU.
gpu-sanitize: build
	@tools/gpu_sanitize.sh $(BUILD_DIR)

# libFuzzer targets for the checkpoint and safetensors readers and EMBER_CUDA_ALLOC_CONF's parser,
# built with Debian's clang in build-fuzz, FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
test-fuzz:
	@tools/ensure_deps.sh clang libclang-rt-14-dev
	@tools/run_fuzz.sh build-fuzz $(FUZZ_SECONDS)

# The API reference: Doxygen (installed when missing) over the headers, whose //
# comments tools/docs_filter.awk hands to it; any warning fails the target.
docs:
	@tools/ensure_deps.sh doxygen
	@tools/docs.sh . $(BUILD_DIR)/docs

# The format check, with the clang-format version tools/ensure_deps.sh pins.
format-check:
	@tools/ensure_deps.sh clang-format-14
	@tools/check_format.sh
format:
	@tools/ensure_deps.sh clang-format-14
	@tools/check_format.sh --fix

clean:
	rm -rf build build-release build-sanitize build-tsan build-fuzz
