/*
 * office native: office.enqueue_run(...), its common paths.
 *
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
 * a keyless_cause (counted there), an origin other than system, a cause, a
 * priority or a not_before (lineage, the loop guard and scheduling are
 * decided there), a set window (parsed and checked there,
 * on every call that could read it), a keyed call outside READ COMMITTED
 * (there its key is checked against what the snapshot cannot see), a lock
 * another transaction holds (there a served key is answered at once, else
 * it waits, or asks a stricter transaction to retry), an insert that met
 * the unique key. Nothing is
 * written before a call is handed on, and the locks taken so far are its own
 * to take again, so that definition decides it exactly as if it had been
 * called first.
 * The looks are index scans, each in a snapshot taken where its statement
 * there takes one (after the lock it follows). The writes are kept plans of
 * that function's statements with every name and operator qualified: no
 * search_path is set, the caller's is in force and resolves nothing here.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_enqueue_run);

/* A window setting that is unset or '' (its default serves), or not. */
static bool
setting_unset(const char *name)
{
	const char *value = GetConfigOption(name, true, false);

	return value == NULL || value[0] == '\0';
}

/*
 * The run serving key in table (its id in id_column, when in at_column),
 * copied out of the scan; false when none does.
 */
static bool
key_served(Oid office, Snapshot snapshot, const char *table, const char *index, text *key,
		   const char *id_column, const char *at_column, Datum *id, TimestampTz *at)
{
	OfficeScan s;
	bool	   found;

	scan_by_text(&s, office, table, index, PointerGetDatum(key), snapshot);
	found = scan_next(&s);
	if (found)
	{
		bool isnull;

		*id = PointerGetDatum(DatumGetTextPCopy(slot_getattr(s.slot, attnum_in(s.heap, id_column), &isnull)));
		*at = DatumGetTimestampTz(slot_getattr(s.slot, attnum_in(s.heap, at_column), &isnull));
	}
	scan_end(&s);
	return found;
}

/*
 * A request or run that never coalesces: entry-triggered, or keyed by a
 * comment (office.comment_key's prefix). The C mirror, once, of
 * office._never_coalesces (sql/10_keys.sql), whose prefix the generated
 * OFFICE_COMMENT_KEY_PREFIX is; the statements below call the SQL one.
 */
static bool
never_coalesces(text *key, bool entry)
{
	return entry ||
		   (key != NULL && VARSIZE_ANY_EXHDR(key) >= OFFICE_COMMENT_KEY_PREFIX_LENGTH &&
			memcmp(VARDATA_ANY(key), OFFICE_COMMENT_KEY_PREFIX, OFFICE_COMMENT_KEY_PREFIX_LENGTH) == 0);
}

/*
 * Whether the bucket (agent, reason, task) may hold a coalesce target: a
 * queued run requested after since for which never_coalesces is false. Without a task, idx_run_bucket_queued
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
		scan_open(&s, office, ON_INDEX(OFFICE_INDEX_RUN_BUCKET_QUEUED));
		text_key(&s, &keys[0], 1, PointerGetDatum(agent));
		text_key(&s, &keys[1], 2, PointerGetDatum(reason));
		at_column = 3;
	}
	else
	{
		scan_open(&s, office, ON_INDEX(OFFICE_INDEX_RUN_TASK_REASON));
		text_key(&s, &keys[0], 1, PointerGetDatum(task));
		text_key(&s, &keys[1], 2, PointerGetDatum(reason));
		text_key(&s, &keys[2], 3, PointerGetDatum(agent));
		at_column = 4;
	}
	ScanKeyEntryInitialize(&keys[at_column - 1], 0, at_column, BTGreaterStrategyNumber, InvalidOid,
						   InvalidOid, F_TIMESTAMPTZ_GT, TimestampTzGetDatum(since));
	scan_start(&s, snapshot, keys, at_column);
	status_attnum = attnum_in(s.heap, OFFICE_COLUMN_RUNS_STATUS);
	entry_attnum = attnum_in(s.heap, OFFICE_COLUMN_RUNS_ENTRY_TRIGGERED);
	key_attnum = attnum_in(s.heap, OFFICE_COLUMN_RUNS_IDEMPOTENCY_KEY);
	while (!found && scan_next(&s))
	{
		bool  isnull;
		bool  entry;
		bool  keyless;
		Datum value;

		value = slot_getattr(s.slot, status_attnum, &isnull);
		if (isnull || !text_is(DatumGetTextPP(value), OFFICE_RUN_QUEUED))
			continue;
		value = slot_getattr(s.slot, entry_attnum, &isnull);
		entry = !isnull && DatumGetBool(value);
		value = slot_getattr(s.slot, key_attnum, &keyless);
		if (never_coalesces(keyless ? NULL : DatumGetTextPP(value), entry))
			continue;
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
	JsonbValue		 value;
	JsonbValue		*object;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < (task ? 2 : 1); i++)
	{
		const char *name = i == 0 ? OFFICE_COLUMN_RUNS_AGENT_PROFILE_ID : OFFICE_COLUMN_RUNS_TASK_ID;
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
	Oid				  types[6] = {TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID, BOOLOID};

	return run_kept(&plan, ANY_SCAN,
					"INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered)"
					" VALUES ($1, $2, $3, $4, $5, $6)"
					" ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
					" RETURNING id",
					6, types, values, nulls, SPI_OK_INSERT_RETURNING, id);
}

/*
 * the UPDATE for a bucket, its task tested by task_test (on n): the newest
 * run that may absorb, read unlocked, taken when it was requested after $4
 */
#define COALESCE_UPDATE(task_test) \
	"UPDATE office.runs r SET coalesced_count = r.coalesced_count OPERATOR(pg_catalog.+) 1, payload = $5," \
	" priority = GREATEST(r.priority, 0)" \
	" WHERE r.id OPERATOR(pg_catalog.=) (SELECT t.id FROM office.runs t" \
	" WHERE t.id OPERATOR(pg_catalog.=) (SELECT n.id FROM office.runs n" \
	" WHERE n.agent_profile_id OPERATOR(pg_catalog.=) $1 AND n.reason OPERATOR(pg_catalog.=) $2" \
	" AND " task_test \
	" AND n.status COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) 'queued'" \
	" AND NOT office._never_coalesces(n.idempotency_key, n.entry_triggered)" \
	" ORDER BY n.requested_at DESC, n.id COLLATE pg_catalog.\"C\" DESC LIMIT 1)" \
	" AND t.status COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) 'queued'" \
	" AND t.requested_at OPERATOR(pg_catalog.>) $4 FOR UPDATE SKIP LOCKED)" \
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
	static SPIPlanPtr		 plans[2] = {NULL, NULL};
	static const char *const texts[2] = {
		COALESCE_UPDATE("n.task_id IS NULL"),
		COALESCE_UPDATE("n.task_id OPERATOR(pg_catalog.=) $3"),
	};
	int	  which = task == NULL ? 0 : 1;
	Oid	  types[5] = {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, JSONBOID};
	Datum values[5] = {PointerGetDatum(agent), PointerGetDatum(reason), PointerGetDatum(task),
					   TimestampTzGetDatum(since), payload};
	char  nulls[5] = {' ', ' ', task == NULL ? 'n' : ' ', ' ', ' '};

	return run_kept(&plans[which], NO_SEQSCAN, texts[which], 5, types, values, nulls,
					SPI_OK_UPDATE_RETURNING, id);
}

/* The target serves the incoming key from now on (office.run_keys_recorded). */
static void
record_key(text *key, Datum run_id)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[2] = {TEXTOID, TEXTOID};
	Datum			  values[2] = {PointerGetDatum(key), run_id};

	(void) run_kept(&plan, ANY_SCAN, "INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES ($1, $2)",
					2, types, values, NULL, SPI_OK_INSERT, NULL);
}

/* An office.enqueue_result; dedup_kind and run_id may be NULL. */
static Datum
enqueue_result(FunctionCallInfo fcinfo, const char *outcome, const char *dedup_kind, Datum run_id)
{
	TupleDesc descriptor;
	Datum	  values[3];
	bool	  nulls[3] = {false, dedup_kind == NULL, false};

	if (get_call_result_type(fcinfo, NULL, &descriptor) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "office.enqueue_run must return office.enqueue_result");
	values[0] = CStringGetTextDatum(outcome);
	values[1] = dedup_kind ? CStringGetTextDatum(dedup_kind) : (Datum) 0;
	values[2] = run_id;
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(descriptor), values, nulls));
}

/*
 * Whether the lineage and scheduling arguments (origin, cause_run_id,
 * priority, not_before) are those of a system request due now: origin NULL
 * or 'system', no cause, priority 0, no not_before. Its run takes the
 * columns' defaults (origin system, depth 0, priority 0) and the loop guard
 * never applies to it; any other request is decided there.
 */
static bool
lineage_default(FunctionCallInfo fcinfo)
{
	text *origin;

	/* An 8-argument declaration (a schema before 0.5.0 on this library) has none. */
	if (PG_NARGS() < 12)
		return true;
	origin = text_argument(fcinfo, 8, false);
	if (origin != NULL &&
		(VARSIZE_ANY_EXHDR(origin) != 6 || memcmp(VARDATA_ANY(origin), "system", 6) != 0))
		return false;
	return text_argument(fcinfo, 9, true) == NULL && (PG_ARGISNULL(10) || PG_GETARG_INT32(10) == 0) &&
		   PG_ARGISNULL(11);
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
		text_argument(fcinfo, 6, true) != NULL || !lineage_default(fcinfo))
		return hand_on(fcinfo, "_enqueue_run_plpgsql");
	{
		Jsonb *object = DatumGetJsonbP(payload);

		if (!JB_ROOT_IS_OBJECT(object) || strlen(JsonbToCString(NULL, &object->root, VARSIZE(object))) > 1048576 ||
			!json_depth_ok(payload))
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		payload = JsonbPGetDatum(object);
	}
	if (key != NULL && VARSIZE_ANY_EXHDR(key) > 512 &&
		pg_mbstrlen_with_len(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)) > 512)
		return hand_on(fcinfo, "_enqueue_run_plpgsql");
	office = get_namespace_oid("office", false);
	{
		Snapshot snapshot = statement_snapshot();
		bool	 accepts = agent_accepts_runs(office, PointerGetDatum(agent), snapshot);

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

		if (XactIsoLevel != XACT_READ_COMMITTED || !setting_unset("office.idempotency_window") ||
			!try_lock(lock_id(OFFICE_LOCK_RUNS_KEY, &key, 1)))
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		snapshot = statement_snapshot();
		served = key_served(office, snapshot, ON_INDEX(OFFICE_INDEX_RUN_IDEMPOTENCY), key,
							OFFICE_COLUMN_RUNS_ID, OFFICE_COLUMN_RUNS_REQUESTED_AT, &run_id, &at);
		UnregisterSnapshot(snapshot);
		if (!served)
		{
			snapshot = statement_snapshot();
			served = key_served(office, snapshot, ON_INDEX(OFFICE_INDEX_RUN_KEYS_RECORDED_PKEY), key,
								OFFICE_COLUMN_RUN_KEYS_RECORDED_RUN_ID, OFFICE_COLUMN_RUN_KEYS_RECORDED_RECORDED_AT, &run_id, &at);
			UnregisterSnapshot(snapshot);
		}
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
	if (!never_coalesces(key, entry))
	{
		text *bucket[3] = {agent, reason, task};
		/* office.coalesce_window's default: interval '5 seconds' */
		TimestampTz since = now - 5 * USECS_PER_SEC;

		Datum waiting[2] = {PointerGetDatum(agent), PointerGetDatum(reason)};

		if (!try_lock(lock_id(OFFICE_LOCK_RUNS_BUCKET, bucket, 3)) ||
			!setting_unset("office.coalesce_window"))
			return hand_on(fcinfo, "_enqueue_run_plpgsql");
		/*
		 * A waiting run of the bucket (its scheduled_retry_at set) or a hold
		 * may make a target of a run older than the window (docs/api.md §9):
		 * that is PL/pgSQL's to decide.
		 */
		if (index_has_entry(office, ON_INDEX(OFFICE_INDEX_WAKE_POLICIES_HOLDS), NULL, 0) ||
			index_has_entry(office, ON_INDEX(OFFICE_INDEX_RUN_WAITING), waiting, 2))
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
