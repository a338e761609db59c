/*
 * office: native definitions of hot-path helpers (95_native.sql binds them).
 *
 * Each function here has a PL/pgSQL definition of the same name, arguments
 * and behaviour in the capability files (05_validation.sql, 30_runs.sql);
 * that one serves wherever this library is not installed (a managed
 * PostgreSQL, officectl migrate without superuser) and is the specification.
 * These are called once per row on every write of office.runs, where a
 * PL/pgSQL call with its SET search_path clause costs more than the work it
 * does (docs/benchmarks.md, "Hot path, issue 13, sixth pass"). They resolve
 * no names, so they need no search_path.
 */
#include "postgres.h"

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
#include "utils/fmgrprotos.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(office_uuid_v7);
PG_FUNCTION_INFO_V1(office_run_row_valid);
PG_FUNCTION_INFO_V1(office_ready_agents);
PG_FUNCTION_INFO_V1(office_check_short_text);
PG_FUNCTION_INFO_V1(office_signal_runs);
PG_FUNCTION_INFO_V1(office_enqueue_run);
PG_FUNCTION_INFO_V1(office_count_dedup);
PG_FUNCTION_INFO_V1(office_claim_run);
PG_FUNCTION_INFO_V1(office_finish_run);

/*
 * office._uuid_v7(): the layout of 05_validation.sql's definition. 48 bits
 * of Unix time in milliseconds, the version nibble 7, 12 bits of the
 * microsecond within that millisecond scaled to 4096 steps, then the
 * variant bits 10 and 62 random bits; as lowercase text, 8-4-4-4-12.
 */
Datum
office_uuid_v7(PG_FUNCTION_ARGS)
{
	/* clock_timestamp()'s clock, from the PostgreSQL epoch to Unix's */
	int64		us = GetCurrentTimestamp() +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	uint64		ms = (uint64) (us / 1000);
	unsigned	fraction = (unsigned) ((us % 1000) * 4096 / 1000);
	uint8		random[8];
	char		text[37];

	if (!pg_strong_random(random, sizeof(random)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	random[0] = (random[0] & 0x3f) | 0x80;
	snprintf(text, sizeof(text),
			 "%08x-%04x-7%03x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 (unsigned) (ms >> 16), (unsigned) (ms & 0xffff), fraction,
			 random[0], random[1], random[2], random[3],
			 random[4], random[5], random[6], random[7]);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(text, 36));
}

/*
 * office._check_short_text(what, value): 05_validation.sql's check, with its
 * messages: NULL or at most 200 characters with no control character
 * (U+0001-U+001F, U+007F-U+009F, the regular expression's class there, read
 * as the regular expression reads it: the server encoding's characters).
 */
/* what names the argument in the messages; format()'s %s shows NULL as '' */
static const char *
argument_name(FunctionCallInfo fcinfo)
{
	return PG_ARGISNULL(0) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(0));
}

/* the control characters the check refuses, as the server encoding reads them */
static bool
has_control_character(text *value, int length)
{
	int			bytes = VARSIZE_ANY_EXHDR(value);
	pg_wchar   *chars = palloc((length + 1) * sizeof(pg_wchar));
	bool		found = false;

	length = pg_mb2wchar_with_len(VARDATA_ANY(value), chars, bytes);
	for (int i = 0; i < length && !found; i++)
		found = (chars[i] >= 0x01 && chars[i] <= 0x1f) || (chars[i] >= 0x7f && chars[i] <= 0x9f);
	pfree(chars);
	return found;
}

/* Whether _check_short_text(what, value) passes value; NULL passes. */
static bool
short_text_ok(text *value)
{
	int			length;

	if (value == NULL)
		return true;
	length = pg_mbstrlen_with_len(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
	return length <= 200 && !has_control_character(value, length);
}

Datum
office_check_short_text(PG_FUNCTION_ARGS)
{
	text	   *value;
	int			bytes;
	int			length;

	if (PG_ARGISNULL(1))
		PG_RETURN_NULL();
	value = PG_GETARG_TEXT_PP(1);
	bytes = VARSIZE_ANY_EXHDR(value);
	length = pg_mbstrlen_with_len(VARDATA_ANY(value), bytes);
	if (length > 200)
	{
		char	   *head = text_to_cstring(value);

		head[pg_mbcharcliplen(head, bytes, 40)] = '\0';
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %s is %d characters, more than 200",
						argument_name(fcinfo), quote_literal_cstr(psprintf("%s...", head)), length)));
	}
	if (has_control_character(value, length))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %s contains a control character",
						argument_name(fcinfo), quote_literal_cstr(text_to_cstring(value)))));
	PG_RETURN_TEXT_P(value);
}

/* SQL's AND over three-valued terms: false wins, then NULL, then true. */
typedef enum
{
	TERM_FALSE,
	TERM_NULL,
	TERM_TRUE
} Term;

static Term
term_and(Term a, Term b)
{
	return a < b ? a : b;
}

static bool
text_is(text *value, const char *word)
{
	size_t		length = strlen(word);

	return VARSIZE_ANY_EXHDR(value) == length &&
		memcmp(VARDATA_ANY(value), word, length) == 0;
}

/*
 * office._run_row_valid(status, reason, payload, idempotency_key): the CHECK
 * of office.runs, with 30_runs.sql's three-valued result: status one of the
 * five, reason not empty, payload an object, idempotency_key NULL or 1 to
 * 512 characters (equality is bytewise under every deterministic collation).
 */
Datum
office_run_row_valid(PG_FUNCTION_ARGS)
{
	Term		result = TERM_TRUE;

	if (PG_ARGISNULL(0))
		result = term_and(result, TERM_NULL);
	else
	{
		text	   *status = PG_GETARG_TEXT_PP(0);

		if (!(text_is(status, "queued") || text_is(status, "claimed") ||
			  text_is(status, "finished") || text_is(status, "failed") ||
			  text_is(status, "cancelled")))
			result = TERM_FALSE;
	}
	if (PG_ARGISNULL(1))
		result = term_and(result, TERM_NULL);
	else if (VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(1)) == 0)
		result = TERM_FALSE;
	if (PG_ARGISNULL(2))
		result = term_and(result, TERM_NULL);
	else
	{
		/* the root container's header alone says what the value is */
		Jsonb	   *payload = (Jsonb *) PG_DETOAST_DATUM_SLICE(PG_GETARG_DATUM(2), 0,
															   sizeof(uint32));

		if (!JB_ROOT_IS_OBJECT(payload))
			result = TERM_FALSE;
	}
	if (!PG_ARGISNULL(3))
	{
		text	   *key = PG_GETARG_TEXT_PP(3);
		int			bytes = VARSIZE_ANY_EXHDR(key);

		/* a character is at least a byte: count them only past 512 bytes */
		if (bytes == 0 ||
			(bytes > 512 && pg_mbstrlen_with_len(VARDATA_ANY(key), bytes) > 512))
			result = TERM_FALSE;
	}
	if (result == TERM_NULL)
		PG_RETURN_NULL();
	PG_RETURN_BOOL(result == TERM_TRUE);
}

/* --- office._ready_agents(): the readier of office.agent_ready ------------ */
/*
 * 30_runs.sql's trigger function, step for step; the readiness comment there
 * says why each step is there and why no claimable agent is left out. The two
 * looks are index scans of their own (the PL/pgSQL function's LIMIT 1 and
 * min() probes, which it keeps from other plans with enable_seqscan and
 * enable_bitmapscan off), each in a snapshot taken after the readiness lock,
 * as a statement of its own would be; the rare insert is a prepared
 * statement.
 */

static Oid
office_relation(Oid office, const char *name)
{
	Oid			relid = get_relname_relid(name, office);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation office.%s does not exist", name)));
	return relid;
}

static bool
text_equal(Datum a, Datum b)
{
	text	   *x = DatumGetTextPP(a);
	text	   *y = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
		memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

/* The number of a column of an office relation, which must have it. */
static int
attnum_in(Relation rel, const char *name)
{
	int			attnum = SPI_fnumber(RelationGetDescr(rel), name);

	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column %s of office.%s does not exist", name,
						RelationGetRelationName(rel))));
	return attnum;
}

static Datum
column(HeapTuple tuple, Relation rel, const char *name, bool *isnull)
{
	return heap_getattr(tuple, attnum_in(rel, name), RelationGetDescr(rel), isnull);
}

static bool
column_is(HeapTuple tuple, Relation rel, const char *name, const char *word)
{
	bool		isnull;
	Datum		value = column(tuple, rel, name, &isnull);

	return !isnull && text_is(DatumGetTextPP(value), word);
}

/* An index scan of a table in office, its rows fetched into slot. */
typedef struct OfficeScan
{
	Relation	heap;
	Relation	index;
	TupleTableSlot *slot;
	IndexScanDesc scan;
} OfficeScan;

/*
 * What a statement of its own would see from here: a new snapshot (READ
 * COMMITTED) after a command counter increment, so the rows the current
 * statement wrote are in it too. The caller unregisters it.
 */
static Snapshot
statement_snapshot(void)
{
	CommandCounterIncrement();
	return RegisterSnapshot(GetTransactionSnapshot());
}

/* Opens an index of an office table for a scan; scan_start starts it. */
static void
scan_open(OfficeScan *s, Oid office, const char *table, const char *index)
{
	s->heap = table_open(office_relation(office, table), AccessShareLock);
	s->index = index_open(office_relation(office, index), AccessShareLock);
	s->slot = table_slot_create(s->heap, NULL);
	s->scan = NULL;
}

/*
 * key: the index's column column equals value, a text (under the column's
 * collation: text equality is bytewise under any deterministic one).
 */
static void
text_key(OfficeScan *s, ScanKey key, int column, Datum value)
{
	ScanKeyEntryInitialize(key, 0, column, BTEqualStrategyNumber, InvalidOid,
						   s->index->rd_indcollation[column - 1], F_TEXTEQ, value);
}

static void
scan_start(OfficeScan *s, Snapshot snapshot, ScanKey keys, int nkeys)
{
	s->scan = index_beginscan(s->heap, s->index, snapshot, nkeys, 0);
	index_rescan(s->scan, keys, nkeys, NULL, 0);
}

/* The scan of the index's entries whose first column equals value, a text. */
static void
scan_by_text(OfficeScan *s, Oid office, const char *table, const char *index,
			 Datum value, Snapshot snapshot)
{
	ScanKeyData key;

	scan_open(s, office, table, index);
	text_key(s, &key, 1, value);
	scan_start(s, snapshot, &key, 1);
}

/*
 * Like scan_by_text, for a scan made many times in one snapshot: the first
 * call (s zeroed) opens and starts it, a later one restarts it at value.
 * scan_end ends it if it was opened.
 */
static void
scan_at(OfficeScan *s, Oid office, const char *table, const char *index, Datum value,
		Snapshot snapshot)
{
	ScanKeyData key;

	if (s->heap == NULL)
	{
		scan_by_text(s, office, table, index, value, snapshot);
		return;
	}
	text_key(s, &key, 1, value);
	index_rescan(s->scan, &key, 1, NULL, 0);
}

/* The next visible row, in index order, into s->slot. */
static bool
scan_next(OfficeScan *s)
{
	return index_getnext_slot(s->scan, ForwardScanDirection, s->slot);
}

/*
 * The relations stay locked until the transaction ends, as a statement's
 * do: the next scan of them in the transaction (most calls make several)
 * then finds its lock held instead of taking it again.
 */
static void
scan_end(OfficeScan *s)
{
	if (s->heap == NULL)
		return;
	index_endscan(s->scan);
	ExecDropSingleTupleTableSlot(s->slot);
	index_close(s->index, NoLock);
	table_close(s->heap, NoLock);
}

/*
 * The least value of column over the agent's rows of the index (the index's
 * second column, so the first visible row has it), among those whose
 * only_null column is NULL when one is named; in a snapshot of its own.
 */
static bool
least_of_agent(Oid office, const char *table, const char *index, Datum agent,
			   const char *column_name, const char *only_null, Datum *value)
{
	Snapshot	snapshot = statement_snapshot();
	OfficeScan	s;
	int			wanted;
	int			nullable;
	bool		found = false;
	bool		isnull;

	scan_by_text(&s, office, table, index, agent, snapshot);
	wanted = attnum_in(s.heap, column_name);
	nullable = only_null ? attnum_in(s.heap, only_null) : 0;
	while (!found && scan_next(&s))
	{
		if (nullable > 0)
		{
			(void) slot_getattr(s.slot, nullable, &isnull);
			if (!isnull)
				continue;
		}
		*value = slot_getattr(s.slot, wanted, &isnull);
		found = !isnull;
	}
	scan_end(&s);
	UnregisterSnapshot(snapshot);
	return found;
}

/*
 * A statement of office's own: prepared the first time, with the argument
 * types types, and kept for the session in *plan; run in an SPI connection
 * of its own, where it must give the SPI result expect. Whether it processed
 * a row; if so and first is given, *first is the first column of the first
 * row it returned, copied out of the connection.
 */
static bool
run_kept(SPIPlanPtr *plan, const char *query, int nargs, Oid *types,
		 Datum *values, const char *nulls, int expect, Datum *first)
{
	bool		processed;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (*plan == NULL)
	{
		SPIPlanPtr	prepared = SPI_prepare(query, nargs, types);

		if (prepared == NULL || SPI_keepplan(prepared) != 0)
			elog(ERROR, "could not prepare: %s", query);
		*plan = prepared;
	}
	if (SPI_execute_plan(*plan, values, nulls, false, 0) != expect)
		elog(ERROR, "could not run: %s", query);
	processed = SPI_processed > 0;
	if (processed && first != NULL)
	{
		bool		isnull;

		*first = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
								   false, -1);
	}
	SPI_finish();
	return processed;
}

static void
insert_ready_row(Datum agent, Datum head)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2] = {agent, head};

	(void) run_kept(&plan, "INSERT INTO office.agent_ready (agent_profile_id, head_at) VALUES ($1, $2)",
					2, types, values, NULL, SPI_OK_INSERT, NULL);
}

Datum
office_ready_agents(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;
	Relation	rel;
	HeapTuple	new_row = NULL;
	HeapTuple	old_row = NULL;
	bool		on_agents;
	bool		on_insert;
	Datum		agents[2];
	int			count = 0;
	Datum		head = (Datum) 0;
	bool		have_head = false;
	Oid			office;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("office._ready_agents() is a trigger function")));
	rel = trigger->tg_relation;
	on_agents = strcmp(RelationGetRelationName(rel), "agent_profiles") == 0;
	on_insert = TRIGGER_FIRED_BY_INSERT(trigger->tg_event);
	if (on_insert)
		new_row = trigger->tg_trigtuple;
	else if (TRIGGER_FIRED_BY_UPDATE(trigger->tg_event))
	{
		old_row = trigger->tg_trigtuple;
		new_row = trigger->tg_newtuple;
	}
	else
		old_row = trigger->tg_trigtuple;

	if (on_agents)
	{
		/* (the WHEN clause: it accepts runs, and did not or had another id) */
		bool		isnull;

		agents[count++] = column(new_row, rel, "id", &isnull);
	}
	else if (on_insert)
	{
		/* a run inserted queued (no WHEN clause): its requested_at is the head */
		bool		isnull;

		if (!column_is(new_row, rel, "status", "queued"))
			return PointerGetDatum(NULL);
		agents[count++] = column(new_row, rel, "agent_profile_id", &isnull);
		head = column(new_row, rel, "requested_at", &isnull);
		have_head = !isnull;
	}
	else
	{
		/* a run queued again, a claim that ended (no WHEN clause: any other update readies none) */
		bool		isnull;
		Datum		old_agent = column(old_row, rel, "agent_profile_id", &isnull);

		if (new_row != NULL && column_is(new_row, rel, "status", "queued"))
		{
			Datum		new_agent = column(new_row, rel, "agent_profile_id", &isnull);
			bool		old_null;
			bool		new_null;
			Datum		old_retry = column(old_row, rel, "scheduled_retry_at", &old_null);
			Datum		new_retry = column(new_row, rel, "scheduled_retry_at", &new_null);
			TimestampTz old_at = DatumGetTimestampTz(column(old_row, rel, "requested_at", &isnull));
			TimestampTz new_at = DatumGetTimestampTz(column(new_row, rel, "requested_at", &isnull));

			if (!column_is(old_row, rel, "status", "queued") ||
				!text_equal(old_agent, new_agent) || new_at < old_at ||
				old_null != new_null ||
				(!old_null && DatumGetTimestampTz(old_retry) != DatumGetTimestampTz(new_retry)))
				agents[count++] = new_agent;
		}
		if (column_is(old_row, rel, "status", "claimed") &&
			(new_row == NULL || !column_is(new_row, rel, "status", "claimed") ||
			 !text_equal(old_agent, column(new_row, rel, "agent_profile_id", &isnull))) &&
			(count == 0 || !text_equal(old_agent, agents[0])))
			agents[count++] = old_agent;
	}

	office = get_namespace_oid("office", false);
	for (int i = 0; i < count; i++)
	{
		text	   *agent = DatumGetTextPP(agents[i]);
		StringInfoData name;
		bool		look;
		Datum		listed;

		initStringInfo(&name);
		appendStringInfoString(&name, "office.runs.ready:");
		appendBinaryStringInfo(&name, VARDATA_ANY(agent), VARSIZE_ANY_EXHDR(agent));
		look = XactIsoLevel == XACT_READ_COMMITTED &&
			DatumGetBool(DirectFunctionCall1(pg_try_advisory_xact_lock_shared_int8,
											 DirectFunctionCall2Coll(hashtextextended,
																	 DEFAULT_COLLATION_OID,
																	 PointerGetDatum(cstring_to_text_with_len(name.data, name.len)),
																	 Int64GetDatum(0))));
		pfree(name.data);
		if (on_agents || !on_insert)
		{
			/* after the lock, in a look of its own: the oldest queued run */
			have_head = least_of_agent(office, "runs", "idx_run_agent_queued", agents[i],
									   "requested_at", NULL, &head);
			if (look && !have_head)
				continue;
		}
		/* the agent's due rows, oldest first: the first is the least head_at */
		if (look && have_head &&
			least_of_agent(office, "agent_ready", "idx_agent_ready_agent", agents[i],
						   "head_at", "due_at", &listed) &&
			DatumGetTimestampTz(listed) <= DatumGetTimestampTz(head))
			continue;
		insert_ready_row(agents[i], have_head ? head : TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()));
	}
	return PointerGetDatum(NULL);
}

/* --- office._signal_runs(agent_profile_ids, run_ids): the wake-up signal -- */
/*
 * 30_runs.sql's function, with its setting's values and error. The looks
 * (does the agent hold a claim; how many of its queued runs are due) are
 * index scans in one snapshot taken as its statement would be.
 */

static void
notify_agent(Datum agent, bool isnull)
{
	/* pg_notify()'s own steps; a NULL payload is the empty one, as there */
	PreventCommandDuringRecovery("NOTIFY");
	Async_Notify("office_runs", isnull ? "" : TextDatumGetCString(agent));
}

static bool
agent_busy(Oid office, Datum agent, Snapshot snapshot)
{
	OfficeScan	s;
	bool		busy;

	scan_by_text(&s, office, "runs", "idx_run_one_claimed_per_agent", agent, snapshot);
	busy = scan_next(&s);
	scan_end(&s);
	return busy;
}

/*
 * The next due run of a scan of idx_run_agent_queued (an agent's queued runs,
 * oldest first) into s->slot: its scheduled_retry_at NULL or passed (now()),
 * its id none of the nskip of skip.
 */
static bool
next_due_run(OfficeScan *s, const Datum *skip, int nskip)
{
	int			retry_attnum = attnum_in(s->heap, "scheduled_retry_at");
	int			id_attnum = attnum_in(s->heap, "id");
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	while (scan_next(s))
	{
		bool		isnull;
		Datum		retry = slot_getattr(s->slot, retry_attnum, &isnull);
		Datum		id;
		bool		skipped = false;

		if (!isnull && DatumGetTimestampTz(retry) > now)
			continue;
		id = slot_getattr(s->slot, id_attnum, &isnull);
		for (int i = 0; i < nskip && !skipped; i++)
			skipped = text_equal(id, skip[i]);
		if (!skipped)
			return true;
	}
	return false;
}

/*
 * How many of the agent's queued runs are due (no scheduled_retry_at, or one
 * that has passed), counting no further than limit; a run with id except is
 * not counted, and when except is given but NULL none is (id <> NULL).
 */
static int
agent_due_runs(Oid office, Datum agent, Snapshot snapshot, int limit,
			   bool has_except, Datum except, bool except_null)
{
	OfficeScan	s;
	int			count = 0;

	if (has_except && except_null)
		return 0;
	scan_by_text(&s, office, "runs", "idx_run_agent_queued", agent, snapshot);
	while (count < limit && next_due_run(&s, has_except ? &except : NULL, has_except ? 1 : 0))
		count++;
	scan_end(&s);
	return count;
}

/* array[1], as SQL subscripts it: NULL unless one-dimensional and in bounds */
static Datum
first_element(ArrayType *array, bool *isnull)
{
	int			lower;

	*isnull = true;
	if (array == NULL || ARR_NDIM(array) != 1)
		return (Datum) 0;
	lower = ARR_LBOUND(array)[0];
	if (lower > 1 || lower + ARR_DIMS(array)[0] - 1 < 1)
		return (Datum) 0;
	return array_get_element(PointerGetDatum(array), 1, (int[]) {1}, -1, -1, false,
							 TYPALIGN_INT, isnull);
}

typedef struct AgentGroup
{
	int			first;			/* index of the agent's first run */
	int			runs;			/* how many runs of the call it has */
} AgentGroup;

typedef struct SortContext
{
	Datum	   *agents;
	bool	   *nulls;
} SortContext;

/* NULLs together, then by bytes: GROUP BY's equality under the collation */
static int
compare_agents(const void *a, const void *b, void *arg)
{
	SortContext *context = (SortContext *) arg;
	int			x = *(const int *) a;
	int			y = *(const int *) b;

	if (context->nulls[x] || context->nulls[y])
	{
		if (context->nulls[x] && context->nulls[y])
			return x - y;
		return context->nulls[x] ? -1 : 1;
	}
	{
		text	   *tx = DatumGetTextPP(context->agents[x]);
		text	   *ty = DatumGetTextPP(context->agents[y]);
		int			lx = VARSIZE_ANY_EXHDR(tx);
		int			ly = VARSIZE_ANY_EXHDR(ty);
		int			c = memcmp(VARDATA_ANY(tx), VARDATA_ANY(ty), Min(lx, ly));

		if (c != 0)
			return c;
		if (lx != ly)
			return lx - ly;
		return x - y;
	}
}

static int
compare_groups(const void *a, const void *b)
{
	return ((const AgentGroup *) a)->first - ((const AgentGroup *) b)->first;
}

typedef enum
{
	NOTIFY_OFF,
	NOTIFY_EDGE,
	NOTIFY_EVERY
} NotifyMode;

/* office.notify: unset or '' is edge, on is every; another value 22023 */
static NotifyMode
notify_mode(void)
{
	const char *mode = GetConfigOption("office.notify", true, false);

	if (mode == NULL || mode[0] == '\0' || strcmp(mode, "edge") == 0)
		return NOTIFY_EDGE;
	if (strcmp(mode, "every") == 0 || strcmp(mode, "on") == 0)
		return NOTIFY_EVERY;
	if (strcmp(mode, "off") != 0)
	{
		char	   *shown = pstrdup(mode);

		shown[pg_mbcharcliplen(shown, strlen(shown), 200)] = '\0';
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("setting office.notify = %s must be edge, every or off",
						quote_literal_cstr(shown))));
	}
	return NOTIFY_OFF;
}

/* The signal for one run just queued (the single-run case of _signal_runs). */
static void
signal_run(Oid office, NotifyMode mode, Datum agent, bool agent_null, Datum run_id, bool run_null)
{
	if (mode == NOTIFY_OFF)
		return;
	if (mode == NOTIFY_EDGE && !agent_null)
	{
		Snapshot	snapshot = statement_snapshot();
		bool		quiet = agent_busy(office, agent, snapshot) ||
			agent_due_runs(office, agent, snapshot, 1, true, run_id, run_null) > 0;

		UnregisterSnapshot(snapshot);
		if (quiet)
			return;
	}
	notify_agent(agent, agent_null);
}

Datum
office_signal_runs(PG_FUNCTION_ARGS)
{
	NotifyMode	mode = notify_mode();
	bool		edge = mode == NOTIFY_EDGE;
	ArrayType  *agents = PG_ARGISNULL(0) ? NULL : PG_GETARG_ARRAYTYPE_P(0);
	ArrayType  *run_ids = PG_ARGISNULL(1) ? NULL : PG_GETARG_ARRAYTYPE_P(1);
	int			count = agents ? ArrayGetNItems(ARR_NDIM(agents), ARR_DIMS(agents)) : 0;
	Oid			office;
	Snapshot	snapshot;

	if (mode == NOTIFY_OFF || count == 0)
		PG_RETURN_VOID();
	office = get_namespace_oid("office", false);

	if (count == 1)
	{
		bool		agent_null;
		bool		run_null;
		Datum		agent = first_element(agents, &agent_null);
		Datum		run_id = first_element(run_ids, &run_null);

		signal_run(office, mode, agent, agent_null, run_id, run_null);
		PG_RETURN_VOID();
	}

	/* each agent once, in the order of its first run */
	{
		Datum	   *elements;
		bool	   *nulls;
		int			n;
		int		   *order;
		AgentGroup *groups;
		int			ngroups = 0;
		SortContext context;

		deconstruct_array(agents, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &n);
		order = palloc(n * sizeof(int));
		for (int i = 0; i < n; i++)
			order[i] = i;
		context.agents = elements;
		context.nulls = nulls;
		qsort_arg(order, n, sizeof(int), compare_agents, &context);
		groups = palloc(n * sizeof(AgentGroup));
		for (int i = 0; i < n; i++)
		{
			/* sorted, so one agent's runs are next to each other */
			if (i > 0 && nulls[order[i - 1]] == nulls[order[i]] &&
				(nulls[order[i]] || text_equal(elements[order[i - 1]], elements[order[i]])))
			{
				groups[ngroups - 1].runs++;
				continue;
			}
			groups[ngroups].first = order[i];
			groups[ngroups].runs = 1;
			ngroups++;
		}
		qsort(groups, ngroups, sizeof(AgentGroup), compare_groups);
		snapshot = edge ? statement_snapshot() : NULL;
		for (int g = 0; g < ngroups; g++)
		{
			int			i = groups[g].first;

			if (edge && !nulls[i] &&
				(agent_busy(office, elements[i], snapshot) ||
				 agent_due_runs(office, elements[i], snapshot, groups[g].runs + 1,
								false, (Datum) 0, false) > groups[g].runs))
				continue;
			notify_agent(elements[i], nulls[i]);
		}
		if (snapshot)
			UnregisterSnapshot(snapshot);
	}
	PG_RETURN_VOID();
}

/* --- office._count_dedup(queue, reason, kind): one suppression counted ---- */
/*
 * 25_counters.sql's function and its _counter_slot(): a slot this
 * transaction holds exclusively (a transaction-scoped advisory lock in the
 * two-int space 1868981101, tried without waiting, this backend's pid % 64
 * first; past 64, 64 + its pid), then the counter's insert or increment.
 */
static int
counter_slot(void)
{
	int			first = MyProcPid % 64;

	for (int i = 0; i < 64; i++)
	{
		int			slot = (first + i) % 64;

		if (DatumGetBool(DirectFunctionCall2(pg_try_advisory_xact_lock_int4,
											 Int32GetDatum(1868981101), Int32GetDatum(slot))))
			return slot;
	}
	return 64 + MyProcPid;
}

/* labels: queue, reason, kind (a NULL one meets the column's NOT NULL) */
static void
count_dedup(const NullableDatum *labels)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[4] = {INT4OID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[4] = {Int32GetDatum(counter_slot())};
	char		nulls[4] = {' '};

	for (int i = 0; i < 3; i++)
	{
		values[i + 1] = labels[i].value;
		nulls[i + 1] = labels[i].isnull ? 'n' : ' ';
	}
	(void) run_kept(&plan,
					"INSERT INTO office.dedup_counters AS c (slot, queue, reason, kind, total)"
					" VALUES ($1, $2, $3, $4, 1)"
					" ON CONFLICT (slot, queue, reason, kind)"
					" DO UPDATE SET total = c.total OPERATOR(pg_catalog.+) 1",
					4, types, values, nulls, SPI_OK_INSERT, NULL);
}

Datum
office_count_dedup(PG_FUNCTION_ARGS)
{
	count_dedup(fcinfo->args);
	PG_RETURN_VOID();
}

/* --- office.enqueue_run(...): the common paths ---------------------------- */
/*
 * 30_runs.sql's function decides every request; this one decides the three
 * that most calls are, with the same statements' effects, and hands every
 * other call unchanged to that definition, which 95_native.sql keeps as
 * office._enqueue_run_plpgsql:
 *   - a valid request whose agent accepts runs, whose key is served (own or
 *     recorded): ('deduped', windowed|durable), counted;
 *   - one that is not served and coalesces: ('coalesced'), its key recorded,
 *     counted;
 *   - one that is not served and finds no coalesce target: its run inserted
 *     ('queued'), signalled.
 * Handed on: anything invalid (that definition raises the error it names),
 * a keyless_cause (counted there), a set window (parsed and checked there),
 * a lock another transaction holds (there it waits, or asks a stricter
 * transaction to retry), an insert that met the unique key. Nothing is
 * written before a call is handed on, and the locks taken so far are its own
 * to take again, so that definition decides it exactly as if it had been
 * called first.
 * The looks are index scans, each in a snapshot taken where its statement
 * there takes one (after the lock it follows). The writes are kept plans of
 * that function's statements with every name and operator qualified: no
 * search_path is set, the caller's is in force and resolves nothing here.
 */

/*
 * The call, arguments unchanged (and, for a set-returning function, its
 * result set), to office.<portable>: the PL/pgSQL definition 95_native.sql
 * keeps under that name, whose arguments are this function's.
 */
static Datum
hand_on(FunctionCallInfo fcinfo, const char *portable)
{
	Oid		   *types;
	int			nargs;
	Oid			function;
	FmgrInfo	flinfo;
	LOCAL_FCINFO(call, 8);
	Datum		result;

	(void) get_func_signature(fcinfo->flinfo->fn_oid, &types, &nargs);
	Assert(nargs <= 8 && nargs == fcinfo->nargs);
	function = LookupFuncName(list_make2(makeString("office"), makeString(pstrdup(portable))),
							  nargs, types, false);
	fmgr_info(function, &flinfo);
	InitFunctionCallInfoData(*call, &flinfo, nargs, fcinfo->fncollation, fcinfo->context,
							 fcinfo->resultinfo);
	for (int i = 0; i < nargs; i++)
		call->args[i] = fcinfo->args[i];
	result = FunctionCallInvoke(call);
	fcinfo->isnull = call->isnull;
	return result;
}

/* An argument as text, NULL for SQL NULL and, where empty_is_null, for ''. */
static text *
text_argument(FunctionCallInfo fcinfo, int n, bool empty_is_null)
{
	text	   *value;

	if (PG_ARGISNULL(n))
		return NULL;
	value = PG_GETARG_TEXT_PP(n);
	return empty_is_null && VARSIZE_ANY_EXHDR(value) == 0 ? NULL : value;
}

/* A window setting that is unset or '' (its default serves), or not. */
static bool
setting_unset(const char *name)
{
	const char *value = GetConfigOption(name, true, false);

	return value == NULL || value[0] == '\0';
}

/* hashtextextended(prefix || parts..., 0): an enqueue lock's id. */
static int64
lock_id(const char *prefix, text **parts, int nparts)
{
	StringInfoData name;

	initStringInfo(&name);
	appendStringInfoString(&name, prefix);
	for (int i = 0; i < nparts; i++)
	{
		if (i > 0)
			appendStringInfoChar(&name, ':');
		if (parts[i] != NULL)
			appendBinaryStringInfo(&name, VARDATA_ANY(parts[i]), VARSIZE_ANY_EXHDR(parts[i]));
	}
	return DatumGetInt64(DirectFunctionCall2Coll(hashtextextended, DEFAULT_COLLATION_OID,
												 PointerGetDatum(cstring_to_text_with_len(name.data, name.len)),
												 Int64GetDatum(0)));
}

static bool
try_lock(int64 id)
{
	return DatumGetBool(DirectFunctionCall1(pg_try_advisory_xact_lock_int8, Int64GetDatum(id)));
}

/*
 * Whether the row a scan of agent_profiles_pkey found (if any) is an agent
 * whose status accepts runs (not _statuses_refusing_runs).
 */
static bool
profile_accepts(OfficeScan *s)
{
	bool		isnull;
	Datum		status;

	if (!scan_next(s))
		return false;
	status = slot_getattr(s->slot, attnum_in(s->heap, "status"), &isnull);
	return isnull ||
		!(text_is(DatumGetTextPP(status), "paused") || text_is(DatumGetTextPP(status), "stopped") ||
		  text_is(DatumGetTextPP(status), "pending_approval"));
}

/* The agent exists and accepts runs, in snapshot. */
static bool
agent_accepts_runs(Oid office, Datum agent, Snapshot snapshot)
{
	OfficeScan	s;
	bool		accepts;

	scan_by_text(&s, office, "agent_profiles", "agent_profiles_pkey", agent, snapshot);
	accepts = profile_accepts(&s);
	scan_end(&s);
	return accepts;
}

/*
 * The run serving key in table (its id in id_column, when in at_column),
 * copied out of the scan; false when none does.
 */
static bool
key_served(Oid office, Snapshot snapshot, const char *table, const char *index, text *key,
		   const char *id_column, const char *at_column, Datum *id, TimestampTz *at)
{
	OfficeScan	s;
	bool		found;

	scan_by_text(&s, office, table, index, PointerGetDatum(key), snapshot);
	found = scan_next(&s);
	if (found)
	{
		bool		isnull;

		*id = PointerGetDatum(DatumGetTextPCopy(slot_getattr(s.slot, attnum_in(s.heap, id_column), &isnull)));
		*at = DatumGetTimestampTz(slot_getattr(s.slot, attnum_in(s.heap, at_column), &isnull));
	}
	scan_end(&s);
	return found;
}

/*
 * Whether the bucket (agent, reason, task) may hold a coalesce target: a
 * queued run requested after since, not entry-triggered, whose key (if any)
 * does not start with task_comment:. Without a task, idx_run_bucket_queued
 * holds only queued runs; with one, idx_run_task_reason holds every status.
 */
static bool
bucket_has_target(Oid office, text *agent, text *reason, text *task, TimestampTz since)
{
	Snapshot	snapshot = statement_snapshot();
	OfficeScan	s;
	ScanKeyData keys[4];
	int			at_column;
	bool		found = false;
	int			status_attnum;
	int			entry_attnum;
	int			key_attnum;

	if (task == NULL)
	{
		scan_open(&s, office, "runs", "idx_run_bucket_queued");
		text_key(&s, &keys[0], 1, PointerGetDatum(agent));
		text_key(&s, &keys[1], 2, PointerGetDatum(reason));
		at_column = 3;
	}
	else
	{
		scan_open(&s, office, "runs", "idx_run_task_reason");
		text_key(&s, &keys[0], 1, PointerGetDatum(task));
		text_key(&s, &keys[1], 2, PointerGetDatum(reason));
		text_key(&s, &keys[2], 3, PointerGetDatum(agent));
		at_column = 4;
	}
	ScanKeyEntryInitialize(&keys[at_column - 1], 0, at_column, BTGreaterStrategyNumber, InvalidOid,
						   InvalidOid, F_TIMESTAMPTZ_GT, TimestampTzGetDatum(since));
	scan_start(&s, snapshot, keys, at_column);
	status_attnum = attnum_in(s.heap, "status");
	entry_attnum = attnum_in(s.heap, "entry_triggered");
	key_attnum = attnum_in(s.heap, "idempotency_key");
	while (!found && scan_next(&s))
	{
		bool		isnull;
		Datum		value;

		value = slot_getattr(s.slot, status_attnum, &isnull);
		if (isnull || !text_is(DatumGetTextPP(value), "queued"))
			continue;
		value = slot_getattr(s.slot, entry_attnum, &isnull);
		if (!isnull && DatumGetBool(value))
			continue;
		value = slot_getattr(s.slot, key_attnum, &isnull);
		if (!isnull)
		{
			text	   *key = DatumGetTextPP(value);

			if (VARSIZE_ANY_EXHDR(key) >= 13 && memcmp(VARDATA_ANY(key), "task_comment:", 13) == 0)
				continue;
		}
		found = true;
	}
	scan_end(&s);
	UnregisterSnapshot(snapshot);
	return found;
}

/* payload || {"agent_profile_id": agent} (|| {"task_id": task}) */
static Datum
payload_with_ids(Datum payload, text *agent, text *task)
{
	JsonbParseState *state = NULL;
	JsonbValue	value;
	JsonbValue *object;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < (task ? 2 : 1); i++)
	{
		const char *name = i == 0 ? "agent_profile_id" : "task_id";
		text	   *id = i == 0 ? agent : task;

		value.type = jbvString;
		value.val.string.val = (char *) name;
		value.val.string.len = strlen(name);
		pushJsonbValue(&state, WJB_KEY, &value);
		value.val.string.val = VARDATA_ANY(id);
		value.val.string.len = VARSIZE_ANY_EXHDR(id);
		pushJsonbValue(&state, WJB_VALUE, &value);
	}
	object = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return DirectFunctionCall2(jsonb_concat, payload, JsonbPGetDatum(JsonbValueToJsonb(object)));
}

/* The INSERT of step 4: the new run's id, or false when the key met a row. */
static bool
insert_run(Datum *values, const char *nulls, Datum *id)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[6] = {TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID, BOOLOID};

	return run_kept(&plan,
					"INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered)"
					" VALUES ($1, $2, $3, $4, $5, $6)"
					" ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
					" RETURNING id",
					6, types, values, nulls, SPI_OK_INSERT_RETURNING, id);
}

/*
 * enable_seqscan off, and with bitmaps_too enable_bitmapscan off, until
 * AtEOXact_GUC(true, the level returned): what a function's SET clauses of
 * them do for the statements it plans and runs ("Plans" in 30_runs.sql).
 */
static int
prefer_indexes(bool bitmaps_too)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (bitmaps_too)
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

/* the UPDATE for a bucket, its task tested by task_test */
#define COALESCE_UPDATE(task_test) \
	"UPDATE office.runs r SET coalesced_count = r.coalesced_count OPERATOR(pg_catalog.+) 1, payload = $5" \
	" WHERE r.id OPERATOR(pg_catalog.=) (SELECT t.id FROM office.runs t" \
	" WHERE t.agent_profile_id OPERATOR(pg_catalog.=) $1 AND t.reason OPERATOR(pg_catalog.=) $2" \
	" AND " task_test \
	" AND t.status COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) 'queued'" \
	" AND t.requested_at OPERATOR(pg_catalog.>) $4 AND NOT t.entry_triggered" \
	" AND (t.idempotency_key IS NULL OR NOT pg_catalog.starts_with(t.idempotency_key, 'task_comment:'))" \
	" ORDER BY t.requested_at DESC, t.id COLLATE pg_catalog.\"C\" DESC LIMIT 1 FOR UPDATE SKIP LOCKED)" \
	" RETURNING r.id"

/*
 * Step 3's UPDATE: the bucket's newest queued run requested after since
 * (not entry-triggered, not comment-keyed; one being claimed right now is
 * skipped) absorbs the request and takes its payload. Its id, or false when
 * none did. The statement is 30_runs.sql's, every operator qualified, and is
 * planned (once a session) with enable_seqscan off, as the function there is
 * ("Plans" in 30_runs.sql: an index serves it whatever the statistics say).
 */
static bool
coalesce_into_target(text *agent, text *reason, text *task, TimestampTz since, Datum payload, Datum *id)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const texts[2] = {
		COALESCE_UPDATE("t.task_id IS NULL"),
		COALESCE_UPDATE("t.task_id OPERATOR(pg_catalog.=) $3"),
	};
	int			which = task == NULL ? 0 : 1;
	Oid			types[5] = {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, JSONBOID};
	Datum		values[5] = {PointerGetDatum(agent), PointerGetDatum(reason), PointerGetDatum(task),
	TimestampTzGetDatum(since), payload};
	char		nulls[5] = {' ', ' ', task == NULL ? 'n' : ' ', ' ', ' '};
	int			nest = prefer_indexes(false);
	bool		found;

	found = run_kept(&plans[which], texts[which], 5, types, values, nulls, SPI_OK_UPDATE_RETURNING, id);
	AtEOXact_GUC(true, nest);
	return found;
}

/* The target serves the incoming key from now on (office.run_keys_recorded). */
static void
record_key(text *key, Datum run_id)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {PointerGetDatum(key), run_id};

	(void) run_kept(&plan, "INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES ($1, $2)",
					2, types, values, NULL, SPI_OK_INSERT, NULL);
}

/* An office.enqueue_result; dedup_kind and run_id may be NULL. */
static Datum
enqueue_result(FunctionCallInfo fcinfo, const char *outcome, const char *dedup_kind, Datum run_id)
{
	TupleDesc	descriptor;
	Datum		values[3];
	bool		nulls[3] = {false, dedup_kind == NULL, false};

	if (get_call_result_type(fcinfo, NULL, &descriptor) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "office.enqueue_run must return office.enqueue_result");
	values[0] = CStringGetTextDatum(outcome);
	values[1] = dedup_kind ? CStringGetTextDatum(dedup_kind) : (Datum) 0;
	values[2] = run_id;
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(descriptor), values, nulls));
}

Datum
office_enqueue_run(PG_FUNCTION_ARGS)
{
	text	   *agent = text_argument(fcinfo, 0, false);
	text	   *reason = text_argument(fcinfo, 1, false);
	Datum		payload = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	text	   *key = text_argument(fcinfo, 3, true);
	text	   *task = text_argument(fcinfo, 4, true);
	bool		entry = !PG_ARGISNULL(5) && PG_GETARG_BOOL(5);
	Oid			office;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	Datum		run_id;
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', key == NULL ? 'n' : ' ', task == NULL ? 'n' : ' ', ' '};

	/* step 1, validation: anything it would refuse is refused there */
	if (agent == NULL || VARSIZE_ANY_EXHDR(agent) == 0 ||
		reason == NULL || VARSIZE_ANY_EXHDR(reason) == 0 ||
		!short_text_ok(reason) || !short_text_ok(task) || PG_ARGISNULL(2) ||
		text_argument(fcinfo, 6, true) != NULL)
		return hand_on(fcinfo, "_enqueue_run_plpgsql");
	{
		Jsonb	   *object = DatumGetJsonbP(payload);

		if (!JB_ROOT_IS_OBJECT(object) || strlen(JsonbToCString(NULL, &object->root, VARSIZE(object))) > 1048576)
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		payload = JsonbPGetDatum(object);
	}
	if (key != NULL && VARSIZE_ANY_EXHDR(key) > 512 &&
		pg_mbstrlen_with_len(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)) > 512)
		return hand_on(fcinfo, "_enqueue_run_plpgsql");
	office = get_namespace_oid("office", false);
	{
		Snapshot	snapshot = statement_snapshot();
		bool		accepts = agent_accepts_runs(office, PointerGetDatum(agent), snapshot);

		UnregisterSnapshot(snapshot);
		if (!accepts)
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
	}

	/* step 2, a served key: looked up after its lock, as there */
	if (key != NULL)
	{
		Snapshot	snapshot;
		TimestampTz at;
		bool		served;

		if (!try_lock(lock_id("office.runs.key:", &key, 1)))
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		snapshot = statement_snapshot();
		served = key_served(office, snapshot, "runs", "idx_run_idempotency", key,
							"id", "requested_at", &run_id, &at);
		UnregisterSnapshot(snapshot);
		if (!served)
		{
			snapshot = statement_snapshot();
			served = key_served(office, snapshot, "run_keys_recorded", "run_keys_recorded_pkey", key,
								"run_id", "recorded_at", &run_id, &at);
			UnregisterSnapshot(snapshot);
		}
		if (served && !setting_unset("office.idempotency_window"))
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		if (served)
		{
			/* office.idempotency_window's default: interval '24 hours' */
			const char *kind = at > now - (TimestampTz) 24 * USECS_PER_HOUR ? "windowed" : "durable";

			NullableDatum labels[3] = {{CStringGetTextDatum("runs"), false},
			{PointerGetDatum(reason), false},
			{CStringGetTextDatum(kind), false}};

			count_dedup(labels);
			return enqueue_result(fcinfo, "deduped", kind, run_id);
		}
	}

	/*
	 * step 3, coalesce, unless entry-triggered or comment-keyed; the UPDATE
	 * only where a look finds a run it could take (most requests find none)
	 */
	payload = payload_with_ids(payload, agent, task);
	if (!entry && (key == NULL || VARSIZE_ANY_EXHDR(key) < 13 ||
				   memcmp(VARDATA_ANY(key), "task_comment:", 13) != 0))
	{
		text	   *bucket[3] = {agent, reason, task};
		/* office.coalesce_window's default: interval '5 seconds' */
		TimestampTz since = now - 5 * USECS_PER_SEC;

		if (!try_lock(lock_id("office.runs.bucket:", bucket, 3)) ||
			!setting_unset("office.coalesce_window"))
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		if (bucket_has_target(office, agent, reason, task, since) &&
			coalesce_into_target(agent, reason, task, since, payload, &run_id))
		{
			NullableDatum labels[3] = {{CStringGetTextDatum("runs"), false},
			{PointerGetDatum(reason), false},
			{CStringGetTextDatum("coalesced"), false}};

			if (key != NULL)
				record_key(key, run_id);
			count_dedup(labels);
			return enqueue_result(fcinfo, "coalesced", NULL, run_id);
		}
	}

	/* step 4, the insert, then the signal */
	values[0] = PointerGetDatum(agent);
	values[1] = PointerGetDatum(reason);
	values[2] = payload;
	values[3] = PointerGetDatum(key);
	values[4] = PointerGetDatum(task);
	values[5] = BoolGetDatum(entry);
	if (!insert_run(values, nulls, &run_id))
		return hand_on(fcinfo, "_enqueue_run_plpgsql");
	signal_run(office, notify_mode(), PointerGetDatum(agent), false, run_id, false);
	return enqueue_result(fcinfo, "queued", NULL, run_id);
}

/* --- office.claim_run(worker_id, agent_profile_id) ------------------------ */
/*
 * 30_runs.sql's loop, step for step: the scan (office.agent_ready's first
 * rows, or the one agent), each candidate's claim lock and busy look, the
 * UPDATE of the row by its id, and the removal of the claimed agent's
 * readiness rows; its comments say why each step is there. The scan is one
 * statement there, so its looks share one snapshot here; the busy look after
 * the lock is a statement of its own, and so gets a snapshot of its own. The
 * writes are kept plans of that function's statements, every name and
 * operator qualified, planned and run with its enable_seqscan and
 * enable_bitmapscan off. Only an invalid worker_id is handed on (to
 * office._claim_run_plpgsql, which raises its error).
 */

#define READY_LOOKS 8			/* the LIMIT 8s of the scan */

typedef struct Candidate
{
	Datum		agent;
	Datum		id;				/* NULL (0): the agent has none (a stale row) */
	TimestampTz requested_at;
	TimestampTz head_at;
} Candidate;

/* A growing list of text datums: the agents and runs a claim skips. */
typedef struct Skips
{
	Datum	   *items;
	int			n;
	int			size;
} Skips;

static void
skip_add(Skips *skips, Datum item)
{
	if (skips->n == skips->size)
	{
		skips->size = Max(8, 2 * skips->size);
		skips->items = skips->items == NULL ? palloc(skips->size * sizeof(Datum)) :
			repalloc(skips->items, skips->size * sizeof(Datum));
	}
	skips->items[skips->n++] = item;
}

static bool
skipped(const Skips *skips, Datum item)
{
	for (int i = 0; i < skips->n; i++)
		if (text_equal(skips->items[i], item))
			return true;
	return false;
}

/* by bytes, as COLLATE "C" orders */
static int
compare_bytes(Datum a, Datum b)
{
	text	   *x = DatumGetTextPP(a);
	text	   *y = DatumGetTextPP(b);
	int			lx = VARSIZE_ANY_EXHDR(x);
	int			ly = VARSIZE_ANY_EXHDR(y);
	int			c = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), Min(lx, ly));

	return c != 0 ? c : (lx > ly) - (lx < ly);
}

/* ORDER BY min(head_at), agent COLLATE "C" */
static int
compare_ready(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	if (x->head_at != y->head_at)
		return x->head_at < y->head_at ? -1 : 1;
	return compare_bytes(x->agent, y->agent);
}

/* ORDER BY the candidate run's requested_at, id COLLATE "C" */
static int
compare_candidates(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	if (x->requested_at != y->requested_at)
		return x->requested_at < y->requested_at ? -1 : 1;
	return compare_bytes(x->id, y->id);
}

/*
 * Up to READY_LOOKS rows of office.agent_ready, agents in skip left out,
 * from index (in its order), added to the agents in ready (each agent once,
 * with the least head_at of its rows): with due_rows, the delayed rows due
 * by now(), else the rows to look at now.
 */
static void
read_ready_rows(Oid office, Snapshot snapshot, const char *index, bool due_rows,
				const Skips *skip, Candidate *ready, int *nready)
{
	OfficeScan	s;
	ScanKeyData key;
	int			agent_attnum;
	int			head_attnum;
	int			due_attnum;
	int			rows = 0;

	scan_open(&s, office, "agent_ready", index);
	if (due_rows)
		ScanKeyEntryInitialize(&key, 0, 1, BTLessEqualStrategyNumber, InvalidOid, InvalidOid,
							   F_TIMESTAMPTZ_LE, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()));
	scan_start(&s, snapshot, &key, due_rows ? 1 : 0);
	agent_attnum = attnum_in(s.heap, "agent_profile_id");
	head_attnum = attnum_in(s.heap, "head_at");
	due_attnum = attnum_in(s.heap, "due_at");
	while (rows < READY_LOOKS && scan_next(&s))
	{
		bool		isnull;
		Datum		agent = slot_getattr(s.slot, agent_attnum, &isnull);
		TimestampTz head = DatumGetTimestampTz(slot_getattr(s.slot, head_attnum, &isnull));
		int			i;

		(void) slot_getattr(s.slot, due_attnum, &isnull);
		if (isnull == due_rows || skipped(skip, agent))
			continue;
		rows++;
		for (i = 0; i < *nready && !text_equal(ready[i].agent, agent); i++)
			;
		if (i == *nready)
		{
			ready[i].agent = PointerGetDatum(DatumGetTextPCopy(agent));
			ready[i].head_at = head;
			(*nready)++;
		}
		else if (head < ready[i].head_at)
			ready[i].head_at = head;
	}
	scan_end(&s);
}

/* The scans of one scan statement, each made once per agent looked at. */
typedef struct AgentLooks
{
	OfficeScan	claimed;		/* idx_run_one_claimed_per_agent */
	OfficeScan	profile;		/* agent_profiles_pkey */
	OfficeScan	queued;			/* idx_run_agent_queued */
} AgentLooks;

/*
 * The agent's candidate, in the looks' snapshot: its oldest due run that is
 * not skipped, unless it holds a claim or does not accept runs.
 */
static void
find_candidate(Oid office, Snapshot snapshot, AgentLooks *looks, Candidate *candidate,
			   const Skips *skip_runs)
{
	OfficeScan *q = &looks->queued;
	bool		isnull;

	candidate->id = (Datum) 0;
	scan_at(&looks->claimed, office, "runs", "idx_run_one_claimed_per_agent", candidate->agent, snapshot);
	if (scan_next(&looks->claimed))
		return;
	scan_at(&looks->profile, office, "agent_profiles", "agent_profiles_pkey", candidate->agent, snapshot);
	if (!profile_accepts(&looks->profile))
		return;
	scan_at(q, office, "runs", "idx_run_agent_queued", candidate->agent, snapshot);
	if (next_due_run(q, skip_runs->items, skip_runs->n))
	{
		candidate->id = PointerGetDatum(DatumGetTextPCopy(slot_getattr(q->slot, attnum_in(q->heap, "id"),
																		&isnull)));
		candidate->requested_at = DatumGetTimestampTz(slot_getattr(q->slot, attnum_in(q->heap, "requested_at"),
																   &isnull));
	}
}

/* The scan's statement: the candidates (ordered) into found, the stale agents into stale. */
static int
scan_candidates(Oid office, Datum agent, const Skips *skip_agents, const Skips *skip_runs,
				Candidate *found, Skips *stale)
{
	Snapshot	snapshot = statement_snapshot();
	Candidate	ready[2 * READY_LOOKS];
	AgentLooks	looks;
	int			nready = 0;
	int			nfound = 0;

	memset(&looks, 0, sizeof(looks));
	if (agent != (Datum) 0)
	{
		ready[0].agent = agent;
		nready = 1;
	}
	else
	{
		read_ready_rows(office, snapshot, "idx_agent_ready_head", false, skip_agents, ready, &nready);
		read_ready_rows(office, snapshot, "idx_agent_ready_due", true, skip_agents, ready, &nready);
		qsort(ready, nready, sizeof(Candidate), compare_ready);
		nready = Min(nready, READY_LOOKS);
	}
	for (int i = 0; i < nready; i++)
	{
		find_candidate(office, snapshot, &looks, &ready[i], skip_runs);
		if (ready[i].id != (Datum) 0)
			found[nfound++] = ready[i];
		else if (agent == (Datum) 0)
			skip_add(stale, ready[i].agent);
	}
	scan_end(&looks.claimed);
	scan_end(&looks.profile);
	scan_end(&looks.queued);
	UnregisterSnapshot(snapshot);
	qsort(found, nfound, sizeof(Candidate), compare_candidates);
	return nfound;
}

/* PERFORM office._unready_agents(agents) */
static void
unready_agents(const Skips *agents)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTARRAYOID};
	Datum		values[1] = {PointerGetDatum(construct_array(agents->items, agents->n, TEXTOID, -1, false,
														 TYPALIGN_INT))};

	(void) run_kept(&plan, "SELECT office._unready_agents($1)", 1, types, values, NULL, SPI_OK_SELECT, NULL);
}

/* The UPDATE of the candidate by its id: the claimed row (office.runs), or false. */
static bool
claim_candidate(Datum id, text *worker, Datum *row)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {id, PointerGetDatum(worker)};
	char		nulls[2] = {' ', worker == NULL ? 'n' : ' '};
	int			nest = prefer_indexes(true);
	bool		claimed;

	claimed = run_kept(&plan,
					   "UPDATE office.runs r SET status = 'claimed', claimed_at = pg_catalog.now(), claimed_by = $2,"
					   " heartbeat_at = pg_catalog.now(), attempt = r.attempt OPERATOR(pg_catalog.+) 1"
					   " WHERE r.id OPERATOR(pg_catalog.=) (SELECT l.id FROM office.runs l"
					   " WHERE l.id OPERATOR(pg_catalog.=) $1"
					   " AND l.status COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) 'queued'"
					   " AND (l.scheduled_retry_at IS NULL"
					   " OR l.scheduled_retry_at OPERATOR(pg_catalog.<=) pg_catalog.now())"
					   " FOR UPDATE SKIP LOCKED)"
					   " RETURNING r",
					   2, types, values, nulls, SPI_OK_UPDATE_RETURNING, row);
	AtEOXact_GUC(true, nest);
	return claimed;
}

/* DELETE FROM office.agent_ready WHERE agent_profile_id = agent */
static void
delete_ready_rows(Datum agent)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {agent};
	int			nest = prefer_indexes(true);

	(void) run_kept(&plan,
					"DELETE FROM office.agent_ready r WHERE r.agent_profile_id OPERATOR(pg_catalog.=) $1",
					1, types, values, NULL, SPI_OK_DELETE, NULL);
	AtEOXact_GUC(true, nest);
}

/* The claimed row, a datum of office.runs, as the call's one result row. */
static void
return_row(FunctionCallInfo fcinfo, Datum row)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTupleHeader header = DatumGetHeapTupleHeader(row);
	HeapTupleData tuple;

	tuple.t_len = HeapTupleHeaderGetDatumLength(header);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = header;
	tuplestore_puttuple(rsinfo->setResult, &tuple);
}

Datum
office_claim_run(PG_FUNCTION_ARGS)
{
	text	   *worker = text_argument(fcinfo, 0, false);
	text	   *agent = text_argument(fcinfo, 1, true);
	Oid			office;
	Skips		skip_agents = {NULL, 0, 0};
	Skips		skip_runs = {NULL, 0, 0};

	if (!short_text_ok(worker))
		return hand_on(fcinfo, "_claim_run_plpgsql");
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	office = get_namespace_oid("office", false);
	for (;;)
	{
		Candidate	found[READY_LOOKS];
		Skips		stale = {NULL, 0, 0};
		int			nfound = scan_candidates(office, PointerGetDatum(agent), &skip_agents, &skip_runs,
											 found, &stale);
		bool		rescan = false;

		if (stale.n > 0)
		{
			unready_agents(&stale);
			for (int i = 0; i < stale.n; i++)
				skip_add(&skip_agents, stale.items[i]);
			if (nfound == 0)
				continue;
		}
		if (nfound == 0)
			break;
		for (int i = 0; i < nfound && !rescan; i++)
		{
			text	   *candidate_agent = DatumGetTextPP(found[i].agent);
			Snapshot	snapshot;
			bool		busy;
			Datum		row;

			if (!try_lock(lock_id("office.runs.claim:", &candidate_agent, 1)))
				busy = true;
			else
			{
				snapshot = statement_snapshot();
				busy = agent_busy(office, found[i].agent, snapshot);
				UnregisterSnapshot(snapshot);
			}
			if (busy)
			{
				if (agent != NULL)
					PG_RETURN_NULL();
				skip_add(&skip_agents, found[i].agent);
				continue;
			}
			if (claim_candidate(found[i].id, worker, &row))
			{
				if (XactIsoLevel == XACT_READ_COMMITTED &&
					try_lock(lock_id("office.runs.ready:", &candidate_agent, 1)))
					delete_ready_rows(found[i].agent);
				return_row(fcinfo, row);
				PG_RETURN_NULL();
			}
			/* locked by someone else or no longer queued: a new scan */
			skip_add(&skip_runs, found[i].id);
			rescan = true;
		}
	}
	PG_RETURN_NULL();
}

/* --- office.finish_run(run_id, attempt) ----------------------------------- */
/*
 * 30_runs.sql's one statement, every operator qualified, planned and run
 * with its enable_seqscan off: claimed -> finished, only if still claimed
 * with this attempt. Nothing to hand on: a NULL argument matches no row, as
 * there.
 */
Datum
office_finish_run(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, INT4OID};
	Datum		values[2] = {PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0),
	PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1)};
	char		nulls[2] = {PG_ARGISNULL(0) ? 'n' : ' ', PG_ARGISNULL(1) ? 'n' : ' '};
	int			nest = prefer_indexes(false);
	bool		finished;

	finished = run_kept(&plan,
						"UPDATE office.runs r SET status = 'finished', finished_at = pg_catalog.now()"
						" WHERE r.id OPERATOR(pg_catalog.=) $1"
						" AND r.status COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) 'claimed'"
						" AND r.attempt OPERATOR(pg_catalog.=) $2",
						2, types, values, nulls, SPI_OK_UPDATE, NULL);
	AtEOXact_GUC(true, nest);
	PG_RETURN_BOOL(finished);
}
