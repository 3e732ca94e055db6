# ember's thin front door (as Neovim's Makefile is): each target installs what is
# missing, configures, builds with all cores and runs. The real build is CMake.
#
#   make demo           build and run the seed training example (CUDA if present, else CPU)
#   make test           build everything and run every test (CUDA tests skip without a GPU)
#   make bench          build in Release and run the benchmark binaries (needs a GPU)
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

.PHONY: all deps configure build demo test bench clean

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

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS); status=$$?; \
	  cd .. && tools/test_summary.sh $(BUILD_DIR)/Testing/Temporary/LastTest.log; exit $$status

bench: BUILD_DIR = build-release
bench: BUILD_TYPE = Release
bench: build
	@for b in $(BUILD_DIR)/benchmarks/bench_*; do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf build build-release
