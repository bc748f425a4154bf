// Included LAST by every .cpp file of core/ and http/. Those folders are pure C++:
// they must never see a PostgreSQL header, because PostgreSQL reports errors with
// longjmp, which would skip C++ destructors, and because their logic must be
// testable without a server. If anything included before this file pulled in
// postgres.h, compilation fails here. (Headers of core/ may be included by pg/,
// after postgres.h, so the check lives in the .cpp files, not in the headers.)
#pragma once
#ifdef POSTGRES_H
#error "core/ and http/ must not include PostgreSQL headers (see docs/architecture.md)"
#endif
