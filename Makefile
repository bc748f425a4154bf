# PGXS build of pg_outbox: the shared library from C++ sources, the control file and
# install scripts, pg_regress (sql/ + expected/) and TAP (test/t/*.pl).
PG_CONFIG ?= pg_config
EXTENSION  = pg_outbox
MODULE_big = pg_outbox
DATA       = $(wildcard extension/pg_outbox--*.sql)

SRCS = $(wildcard src/core/*.cpp) $(wildcard src/http/*.cpp) $(wildcard src/pg/*.cpp)
OBJS = $(SRCS:.cpp=.o)

# One regress file per topic, run in name order (the numeric prefix sets it).
REGRESS      = $(basename $(notdir $(sort $(wildcard sql/*.sql))))
TAP_TESTS    = 1
PROVE_TESTS  = test/t/*.pl

# PostgreSQL headers as system headers: their C idioms (register, unused parameters)
# warn under C++17, and we want warnings about our code only.
PG_CPPFLAGS = -Isrc -isystem $(shell $(PG_CONFIG) --includedir-server)
# -MMD -MP: each object records the headers it includes (src/*/*.d), so that changing
# a header rebuilds every object that uses it; PGXS tracks no C++ dependencies itself.
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wshadow -Wno-missing-field-initializers -MMD -MP
ifdef WERROR
PG_CXXFLAGS += -Werror
endif
SHLIB_LINK = -lcurl -lcrypto -lstdc++

# Debian's PGXS builds LLVM bitcode for JIT inlining; it has no rule for C++.
override with_llvm = no


PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

-include $(OBJS:.o=.d)
EXTRA_CLEAN = $(OBJS:.o=.d) build

.PHONY: format unit bench bench-memory soak
format:
	clang-format -i $(wildcard src/*/*.cpp src/*/*.hpp test/unit/*.cpp)

unit:
	SKIP_SETUP=1 bash test/run_unit.sh

bench:
	bash bench/run.sh

bench-memory:
	bash bench/worker_memory.sh

soak:
	bash test/soak.sh $(SOAK_SECONDS)
