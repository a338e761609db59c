/*
 * office native: what the files share. Tests of text values; the office
 * relations and index scans of them; office's own kept statements; the
 * settings a PL/pgSQL function's SET clauses would make; advisory lock ids;
 * and the hand-on of a call to a PL/pgSQL definition.
 */
#include "office.h"

PG_MODULE_MAGIC;

bool
text_is(text *value, const char *word)
{
	size_t length = strlen(word);

	return VARSIZE_ANY_EXHDR(value) == length &&
		   memcmp(VARDATA_ANY(value), word, length) == 0;
}

/* Whether value is one of the n words. */
bool
text_is_one_of(text *value, const char *const *words, int n)
{
	for (int i = 0; i < n; i++)
		if (text_is(value, words[i]))
			return true;
	return false;
}

bool
text_equal(Datum a, Datum b)
{
	text *x = DatumGetTextPP(a);
	text *y = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
		   memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

/* Whether item equals one of the n texts of items. */
bool
text_in(Datum item, const Datum *items, int n)
{
	for (int i = 0; i < n; i++)
		if (text_equal(item, items[i]))
			return true;
	return false;
}

/* by bytes, as COLLATE "C" orders */
int
compare_bytes(Datum a, Datum b)
{
	text *x = DatumGetTextPP(a);
	text *y = DatumGetTextPP(b);
	int	  lx = VARSIZE_ANY_EXHDR(x);
	int	  ly = VARSIZE_ANY_EXHDR(y);
	int	  c = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), Min(lx, ly));

	return c != 0 ? c : (lx > ly) - (lx < ly);
}

/*
 * The office relations' OIDs, looked up by name once a session and kept
 * until pg_class changes: a call of the hot path opens a relation a dozen
 * times and more (each scan, each probe, each look), and each name lookup
 * is a catalog cache search: made anew each time, they were 2 % of a fresh
 * enqueue's instructions and 1 % of a claim + finish cycle's
 * (docs/benchmarks.md, "where the no-policy cost of 0.5.0 goes"). The names are
 * constants.h's string constants, so an entry is found by the pointer; the
 * same name reached by another pointer takes a second entry, harmlessly.
 * Any change to pg_class (a DROP, a rename, an upgrade's new index)
 * forgets them all, through the catalog cache's invalidation callback.
 */
#define RELATION_CACHE_SIZE 48

typedef struct CachedRelation
{
	const char *name;
	Oid			office;
	Oid			relid;
} CachedRelation;

static CachedRelation relation_cache[RELATION_CACHE_SIZE];
static int			  relation_cache_used = 0;
static bool			  relation_cache_registered = false;

static void
forget_relations(Datum arg, int cacheid, uint32 hashvalue)
{
	relation_cache_used = 0;
}

/* The OID of office's relation name; InvalidOid where there is none. */
static Oid
lookup_relation(Oid office, const char *name)
{
	Oid relid;

	for (int i = 0; i < relation_cache_used; i++)
		if (relation_cache[i].name == name && relation_cache[i].office == office)
			return relation_cache[i].relid;
	if (!relation_cache_registered)
	{
		CacheRegisterSyscacheCallback(RELNAMENSP, forget_relations, (Datum) 0);
		relation_cache_registered = true;
	}
	relid = get_relname_relid(name, office);
	if (OidIsValid(relid) && relation_cache_used < RELATION_CACHE_SIZE)
		relation_cache[relation_cache_used++] = (CachedRelation){name, office, relid};
	return relid;
}

static Oid
office_relation(Oid office, const char *name)
{
	Oid relid = lookup_relation(office, name);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation office.%s does not exist", name)));
	return relid;
}

/* The number of a column of an office relation, which must have it. */
int
attnum_in(Relation rel, const char *name)
{
	int attnum = SPI_fnumber(RelationGetDescr(rel), name);

	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column %s of office.%s does not exist", name,
						RelationGetRelationName(rel))));
	return attnum;
}

Datum
column(HeapTuple tuple, Relation rel, const char *name, bool *isnull)
{
	return heap_getattr(tuple, attnum_in(rel, name), RelationGetDescr(rel), isnull);
}

bool
column_is(HeapTuple tuple, Relation rel, const char *name, const char *word)
{
	bool  isnull;
	Datum value = column(tuple, rel, name, &isnull);

	return !isnull && text_is(DatumGetTextPP(value), word);
}

/*
 * What a statement of its own would see from here: a new snapshot (READ
 * COMMITTED) after a command counter increment, so the rows the current
 * statement wrote are in it too. The caller unregisters it.
 */
Snapshot
statement_snapshot(void)
{
	CommandCounterIncrement();
	return RegisterSnapshot(GetTransactionSnapshot());
}

/* Opens an index of an office table for a scan; scan_start starts it. */
void
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
void
text_key(OfficeScan *s, ScanKey key, int column, Datum value)
{
	ScanKeyEntryInitialize(key, 0, column, BTEqualStrategyNumber, InvalidOid,
						   s->index->rd_indcollation[column - 1], F_TEXTEQ, value);
}

void
scan_start(OfficeScan *s, Snapshot snapshot, ScanKey keys, int nkeys)
{
	s->scan = index_beginscan(s->heap, s->index, snapshot, nkeys, 0);
	index_rescan(s->scan, keys, nkeys, NULL, 0);
}

/*
 * Whether the index has a live entry (in a statement snapshot) whose first
 * nkeys columns equal the texts values (none: any entry). For the partial
 * indexes the hot path probes before handing a call on to PL/pgSQL. An index
 * the schema does not have (one before 0.5.0 on this library, in the middle
 * of an upgrade) has no entry.
 */
bool
index_has_entry(Oid office, const char *table, const char *index, const Datum *values, int nkeys)
{
	Snapshot	snapshot;
	OfficeScan	s;
	ScanKeyData keys[4];
	bool		found;

	Assert(nkeys <= 4);
	if (!OidIsValid(lookup_relation(office, index)))
		return false;
	snapshot = statement_snapshot();
	scan_open(&s, office, table, index);
	for (int i = 0; i < nkeys; i++)
		text_key(&s, &keys[i], i + 1, values[i]);
	scan_start(&s, snapshot, keys, nkeys);
	found = scan_next(&s);
	scan_end(&s);
	UnregisterSnapshot(snapshot);
	return found;
}

/* The scan of the index's entries whose first column equals value, a text. */
void
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
void
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
bool
scan_next(OfficeScan *s)
{
	return index_getnext_slot(s->scan, ForwardScanDirection, s->slot);
}

/*
 * The relations stay locked until the transaction ends, as a statement's
 * do: the next scan of them in the transaction (most calls make several)
 * then finds its lock held instead of taking it again.
 */
void
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
 * enable_seqscan off, and with bitmaps_too enable_bitmapscan off, until
 * AtEOXact_GUC(true, the level returned).
 */
static int
prefer_indexes(bool bitmaps_too)
{
	int nest = NewGUCNestLevel();

	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (bitmaps_too)
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

/*
 * A statement of office's own: prepared the first time, with the argument
 * types types, and kept for the session in *plan; planned and run with the
 * scans scans allows, in an SPI connection of its own, where it must give
 * the SPI result expect. Whether it processed a row; if so and first is
 * given, *first is the first column of the first row it returned, copied
 * out of the connection.
 */
bool
run_kept(SPIPlanPtr *plan, KeptScans scans, const char *query, int nargs, Oid *types,
		 Datum *values, const char *nulls, int expect, Datum *first)
{
	int	 nest = scans == ANY_SCAN ? 0 : prefer_indexes(scans == NO_SEQ_OR_BITMAP_SCAN);
	bool processed;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (*plan == NULL)
	{
		SPIPlanPtr prepared = SPI_prepare(query, nargs, types);

		if (prepared == NULL || SPI_keepplan(prepared) != 0)
			elog(ERROR, "could not prepare: %s", query);
		*plan = prepared;
	}
	if (SPI_execute_plan(*plan, values, nulls, false, 0) != expect)
		elog(ERROR, "could not run: %s", query);
	processed = SPI_processed > 0;
	if (processed && first != NULL)
	{
		bool isnull;

		*first = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
								   false, -1);
	}
	SPI_finish();
	if (scans != ANY_SCAN)
		AtEOXact_GUC(true, nest);
	return processed;
}

/*
 * The call, arguments unchanged (and, for a set-returning function, its
 * result set), to office.<portable>: the PL/pgSQL definition 95_native.sql
 * keeps under that name, whose arguments are this function's.
 */
Datum
hand_on(FunctionCallInfo fcinfo, const char *portable)
{
	Oid		*types;
	int		 nargs;
	Oid		 function;
	FmgrInfo flinfo;
	LOCAL_FCINFO(call, 12);
	Datum result;

	(void) get_func_signature(fcinfo->flinfo->fn_oid, &types, &nargs);
	Assert(nargs <= 12 && nargs == fcinfo->nargs);
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
text *
text_argument(FunctionCallInfo fcinfo, int n, bool empty_is_null)
{
	text *value;

	if (PG_ARGISNULL(n))
		return NULL;
	value = PG_GETARG_TEXT_PP(n);
	return empty_is_null && VARSIZE_ANY_EXHDR(value) == 0 ? NULL : value;
}

/* hashtextextended(prefix || parts..., 0): an enqueue lock's id. */
int64
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

bool
try_lock(int64 id)
{
	return DatumGetBool(DirectFunctionCall1(pg_try_advisory_xact_lock_int8, Int64GetDatum(id)));
}
