/*
 * office: native definitions of hot-path functions (95_native.sql binds them).
 *
 * Each SQL-callable function here has a PL/pgSQL definition of the same name,
 * arguments and behaviour in the capability files (05_validation.sql,
 * 30_runs.sql); that one serves wherever this library is not installed (a
 * managed PostgreSQL, officectl migrate without superuser) and is the
 * specification. They are the hot path: called once per row on every write
 * of office.runs, or once per enqueue, claim and finish, where a PL/pgSQL
 * call with its SET clauses costs more than the work it does
 * (docs/benchmarks.md, "Hot path"). They set no search_path: the
 * only names they resolve are the qualified ones of their kept statements.
 * One file per capability; this header declares what they share.
 */
#ifndef OFFICE_NATIVE_H
#define OFFICE_NATIVE_H

#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/fmgrprotos.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "constants.h"

/* "table", "index" of an OFFICE_INDEX_x of constants.h. */
#define ON_INDEX(index) index##_ON, index

/*
 * What the files share stays inside office.so: PostgreSQL loads libraries
 * with RTLD_GLOBAL, so an exported name like column() could be taken by, or
 * take, another library's.
 */
#if defined(__GNUC__)
#define OFFICE_INTERNAL __attribute__((visibility("hidden")))
#else
#define OFFICE_INTERNAL
#endif

/* An index scan of a table in office, its rows fetched into slot. */
typedef struct OfficeScan
{
	Relation		heap;
	Relation		index;
	TupleTableSlot *slot;
	IndexScanDesc	scan;
} OfficeScan;

/*
 * The scans a kept statement may be planned with (run_kept): what a PL/pgSQL
 * function's SET enable_seqscan = off (and enable_bitmapscan = off) gives
 * its statements ("Plans" in 30_runs.sql).
 */
typedef enum
{
	ANY_SCAN,
	NO_SEQSCAN,
	NO_SEQ_OR_BITMAP_SCAN
} KeptScans;

/* office.notify: when the wake-up signal is sent (signal.c) */
typedef enum
{
	NOTIFY_OFF,
	NOTIFY_EDGE,
	NOTIFY_EVERY
} NotifyMode;

/* validation.c */
extern OFFICE_INTERNAL bool short_text_ok(text *value);
extern OFFICE_INTERNAL bool json_depth_ok(Datum value);
extern OFFICE_INTERNAL bool json_too_small_to_fail(Datum value);

/* shared.c */
extern OFFICE_INTERNAL bool		text_is(text *value, const char *word);
extern OFFICE_INTERNAL bool		text_equal(Datum a, Datum b);
extern OFFICE_INTERNAL bool		text_in(Datum item, const Datum *items, int n);
extern OFFICE_INTERNAL bool		text_is_one_of(text *value, const char *const *words, int n);
extern OFFICE_INTERNAL int		compare_bytes(Datum a, Datum b);
extern OFFICE_INTERNAL int		attnum_in(Relation rel, const char *name);
extern OFFICE_INTERNAL Datum	column(HeapTuple tuple, Relation rel, const char *name, bool *isnull);
extern OFFICE_INTERNAL bool		column_is(HeapTuple tuple, Relation rel, const char *name, const char *word);
extern OFFICE_INTERNAL Snapshot statement_snapshot(void);
extern OFFICE_INTERNAL void		scan_open(OfficeScan *s, Oid office, const char *table, const char *index);
extern OFFICE_INTERNAL void		text_key(OfficeScan *s, ScanKey key, int column, Datum value);
extern OFFICE_INTERNAL void		scan_start(OfficeScan *s, Snapshot snapshot, ScanKey keys, int nkeys);
extern OFFICE_INTERNAL void		scan_by_text(OfficeScan *s, Oid office, const char *table, const char *index, Datum value, Snapshot snapshot);
extern OFFICE_INTERNAL void		scan_at(OfficeScan *s, Oid office, const char *table, const char *index, Datum value, Snapshot snapshot);
extern OFFICE_INTERNAL bool		scan_next(OfficeScan *s);
extern OFFICE_INTERNAL bool		index_has_entry(Oid office, const char *table, const char *index,
												const Datum *values, int nkeys);
extern OFFICE_INTERNAL void		scan_end(OfficeScan *s);
extern OFFICE_INTERNAL bool		run_kept(SPIPlanPtr *plan, KeptScans scans, const char *query, int nargs, Oid *types, Datum *values, const char *nulls, int expect, Datum *first);
extern OFFICE_INTERNAL Datum	hand_on(FunctionCallInfo fcinfo, const char *portable);
extern OFFICE_INTERNAL text	   *text_argument(FunctionCallInfo fcinfo, int n, bool empty_is_null);
extern OFFICE_INTERNAL int64	lock_id(const char *prefix, text **parts, int nparts);
extern OFFICE_INTERNAL bool		try_lock(int64 id);

/* agents.c */
extern OFFICE_INTERNAL bool agent_busy(Oid office, Datum agent, Snapshot snapshot);
extern OFFICE_INTERNAL bool profile_accepts(OfficeScan *s);
extern OFFICE_INTERNAL bool agent_accepts_runs(Oid office, Datum agent, Snapshot snapshot);
extern OFFICE_INTERNAL bool next_due_run(OfficeScan *s, const Datum *skip, int nskip);
extern OFFICE_INTERNAL int	agent_due_runs(Oid office, Datum agent, Snapshot snapshot, int limit, bool has_except, Datum except, bool except_null);
extern OFFICE_INTERNAL bool least_of_agent(Oid office, const char *table, const char *index, Datum agent, const char *column_name, const char *only_null, Datum *value);

/* signal.c */
extern OFFICE_INTERNAL NotifyMode notify_mode(void);
extern OFFICE_INTERNAL void		  signal_run(Oid office, NotifyMode mode, Datum agent, bool agent_null, Datum run_id, bool run_null);

/* counters.c */
extern OFFICE_INTERNAL void count_dedup(const NullableDatum *labels);

#endif /* OFFICE_NATIVE_H */
