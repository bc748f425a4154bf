// The background worker's entry point and its PostgreSQL-facing shape, after
// worker_spi: signal handlers, the database connection (its name is the worker's
// argument), then the C++ loop, entered through the boundary.
#include "pg/boundary.hpp"
#include "pg/worker.hpp"

extern "C" {
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"

PGDLLEXPORT void pg_outbox_worker_main(Datum argument);
}

#include <cstdio>
#include <exception>

void pg_outbox_worker_main(Datum) {
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  // bgw_extra holds the database name; a missing database is a FATAL here, logged
  // with its name, and the postmaster tries again after bgw_restart_time.
  BackgroundWorkerInitializeConnection(MyBgworkerEntry->bgw_extra, nullptr, 0);

  char failure[512] = {0};
  try {
    pg_outbox::pg::Worker worker;
    worker.run();
  } catch (const std::exception& e) {
    snprintf(failure, sizeof failure, "%s", e.what());
  } catch (...) {
    snprintf(failure, sizeof failure, "unknown C++ exception");
  }
  // The loop only ends by exception when the worker cannot go on at all (libcurl
  // cannot start): exit with an error so the postmaster restarts us.
  ereport(FATAL, (errmsg("pg_outbox worker stopped: %s", failure)));
}
