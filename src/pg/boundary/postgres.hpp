// The PostgreSQL headers every file of pg/ needs, with C linkage. postgres.h must
// come first; files add the specific headers they use in their own extern "C" block.
#pragma once
extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/elog.h"
#include "utils/memutils.h"
}
