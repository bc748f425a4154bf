# PGXS build of pg_outbox: the shared library from C++ sources, the control file and
# install scripts, pg_regress (sql/ + expected/) and TAP (test/t/*.pl).
PG_CONFIG ?= pg_config
EXTENSION  = pg_outbox
MODULE_big = pg_outbox
# The install script of the current version and its update from the previous one are
# built from ordered sources (extension/src, extension/upgrade); the scripts of earlier
# releases are frozen as they shipped.
# The one version: pg_outbox.control's default_version (the C++ code gets it as
# PG_OUTBOX_VERSION; test/check_tree.sh checks that META.json says the same).
OUTBOX_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" pg_outbox.control)
DATA       = extension/pg_outbox--0.1.0.sql extension/pg_outbox--0.2.0.sql extension/pg_outbox--0.3.0.sql \
             extension/pg_outbox--0.1.0--0.2.0.sql extension/pg_outbox--0.2.0--0.3.0.sql
PREVIOUS_VERSION = 0.3.0
DATA_built = extension/pg_outbox--$(OUTBOX_VERSION).sql extension/pg_outbox--$(PREVIOUS_VERSION)--$(OUTBOX_VERSION).sql
INSTALL_SOURCES = $(sort $(wildcard extension/src/*.sql))
# What an update re-runs: every function, view and privilege file (CREATE OR REPLACE),
# not the schemas and tables (extension/src/0*, 1*, 3*), which the update script changes
# itself.
REPLAYED_SOURCES = $(filter-out extension/src/0% extension/src/1% extension/src/3%,$(INSTALL_SOURCES))
# The update from the previous version: the files of extension/upgrade/<from>--<to>/ in
# name order, those numbered below 50 before the replayed sources (they change tables
# and drop what is created again), those from 50 on after them (grants put back). The
# table files this version adds (UPDATE_TABLES: their statements are the same on a fresh
# install and on an update) run after the first group.
UPDATE_DIR     = extension/upgrade/$(PREVIOUS_VERSION)--$(OUTBOX_VERSION)
UPDATE_TABLES  = extension/src/37_attempts.sql extension/src/37_pull_tables.sql extension/src/38_subscriptions.sql \
                 extension/src/39_replay_queue.sql
UPDATE_BEFORE  = $(sort $(wildcard $(UPDATE_DIR)/[0-4]*.sql)) $(UPDATE_TABLES)
UPDATE_AFTER   = $(sort $(wildcard $(UPDATE_DIR)/[5-9]*.sql))

SRCS = $(wildcard src/core/*.cpp) $(wildcard src/http/*.cpp) $(wildcard src/pg/*/*.cpp)
OBJS = $(SRCS:.cpp=.o)

# `make installcheck`: the pg_regress suite (sql/ against expected/, one file per topic,
# run in name order) against a running server, reached as psql reaches it (PGHOST,
# PGPORT, PGUSER...).  The server must have shared_preload_libraries = 'pg_outbox' and
# pg_outbox.database = 'postgres' (no worker may serve the suite's database,
# contrib_regression), and PGUSER must be a superuser; installcheck-server
# checks that first.  test/run_regress.sh does all this on a throwaway cluster.
REGRESS      = $(basename $(notdir $(sort $(wildcard sql/*.sql))))
REGRESS_PREP = installcheck-server
# The TAP suite (test/t/*.pl) starts clusters of its own and refuses to run as root:
# test/run_tap.sh runs it.  `make installcheck TAP=1` adds it to installcheck, run by a
# user who may write to this directory (tmp_check/).
ifdef TAP
TAP_TESTS    = 1
PROVE_TESTS  = test/t/*.pl
endif

# PostgreSQL headers as system headers: their C idioms (register, unused parameters)
# warn under C++17, and we want warnings about our code only.
PG_CPPFLAGS = -Isrc -isystem $(shell $(PG_CONFIG) --includedir-server) -DPG_OUTBOX_VERSION='"$(OUTBOX_VERSION)"'
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
# The version the code is built with (PG_OUTBOX_VERSION) comes from the control file.
$(OBJS): pg_outbox.control
EXTRA_CLEAN = $(OBJS:.o=.d) build

extension/pg_outbox--$(OUTBOX_VERSION).sql: $(INSTALL_SOURCES)
	cat $^ > $@

extension/pg_outbox--$(PREVIOUS_VERSION)--$(OUTBOX_VERSION).sql: $(UPDATE_BEFORE) $(REPLAYED_SOURCES) $(UPDATE_AFTER)
	cat $^ > $@

# Before pg_regress: is the server one the suite can run against? (see REGRESS above)
.PHONY: installcheck-server
installcheck-server:
	@'$(bindir)/psql' -X -d postgres -f test/installcheck_server.sql

# `make dist`: the PGXN distribution pg_outbox-<version>.zip of the committed HEAD
# (.gitattributes says what stays out; test/check_dist.sh checks the result).
.PHONY: dist
dist:
	git archive --format=zip --prefix=$(EXTENSION)-$(OUTBOX_VERSION)/ -o $(EXTENSION)-$(OUTBOX_VERSION).zip HEAD

.PHONY: format unit bench bench-memory bench-steady soak
format:
	clang-format -i $(wildcard src/*/*.cpp src/*/*.hpp src/*/*/*.cpp src/*/*/*.hpp test/unit/*.cpp)

unit:
	SKIP_SETUP=1 bash test/run_unit.sh

bench:
	bash bench/run.sh

bench-memory:
	bash bench/worker_memory.sh

bench-steady:
	bash bench/steady_state.sh

soak:
	bash test/soak.sh $(SOAK_SECONDS)
