/*
 * office native: office.claim_run(worker_id, agent_profile_id), and below
 * office.finish_run(run_id, attempt, worker_id).
 *
 * 30_runs.sql's loop, step for step: the scan (office.agent_ready's first
 * rows, or the one agent), each candidate's claim lock and busy look, the
 * UPDATE of the row by its id, and the removal of the claimed agent's
 * readiness rows; its comments say why each step is there. The scan is one
 * statement there, so its looks share one snapshot here; the busy look after
 * the lock is a statement of its own, and so gets a snapshot of its own. The
 * writes are kept plans of that function's statements, every name and
 * operator qualified, planned and run with its enable_seqscan and
 * enable_bitmapscan off. An invalid worker_id is handed on (to
 * office._claim_run_plpgsql, which raises its error), and so is every call
 * while a policy that can hold a run exists (a budget, cooldown or run cap)
 * or a queued run has a priority other than 0: the holds, the delay of a
 * held agent's readiness rows and the claim order by priority are that
 * definition's, so both decide alike. With neither, that costs two probes
 * of empty partial indexes.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_claim_run);
PG_FUNCTION_INFO_V1(office_finish_run);

#define READY_LOOKS 8 /* the LIMIT 8s of the scan */

typedef struct Candidate
{
	Datum		agent;
	Datum		id; /* NULL (0): the agent has none (a stale row) */
	TimestampTz requested_at;
	TimestampTz head_at;
} Candidate;

/* A growing list of text datums: the agents and runs a claim skips. */
typedef struct Skips
{
	Datum *items;
	int	   n;
	int	   size;
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

	scan_open(&s, office, OFFICE_TABLE_AGENT_READY, index);
	if (due_rows)
		ScanKeyEntryInitialize(&key, 0, 1, BTLessEqualStrategyNumber, InvalidOid, InvalidOid,
							   F_TIMESTAMPTZ_LE, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()));
	scan_start(&s, snapshot, &key, due_rows ? 1 : 0);
	agent_attnum = attnum_in(s.heap, OFFICE_COLUMN_AGENT_READY_AGENT_PROFILE_ID);
	head_attnum = attnum_in(s.heap, OFFICE_COLUMN_AGENT_READY_HEAD_AT);
	due_attnum = attnum_in(s.heap, OFFICE_COLUMN_AGENT_READY_DUE_AT);
	while (rows < READY_LOOKS && scan_next(&s))
	{
		bool		isnull;
		Datum		agent = slot_getattr(s.slot, agent_attnum, &isnull);
		TimestampTz head = DatumGetTimestampTz(slot_getattr(s.slot, head_attnum, &isnull));
		int			i;

		(void) slot_getattr(s.slot, due_attnum, &isnull);
		if (isnull == due_rows || text_in(agent, skip->items, skip->n))
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
	OfficeScan claimed; /* idx_run_one_claimed_per_agent */
	OfficeScan profile; /* agent_profiles_pkey */
	OfficeScan queued;	/* idx_run_agent_queued */
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
	scan_at(&looks->claimed, office, ON_INDEX(OFFICE_INDEX_RUN_ONE_CLAIMED_PER_AGENT), candidate->agent, snapshot);
	if (scan_next(&looks->claimed))
		return;
	scan_at(&looks->profile, office, ON_INDEX(OFFICE_INDEX_AGENT_PROFILES_PKEY), candidate->agent, snapshot);
	if (!profile_accepts(&looks->profile))
		return;
	scan_at(q, office, ON_INDEX(OFFICE_INDEX_RUN_AGENT_QUEUED), candidate->agent, snapshot);
	if (next_due_run(q, skip_runs->items, skip_runs->n))
	{
		candidate->id = PointerGetDatum(DatumGetTextPCopy(slot_getattr(q->slot, attnum_in(q->heap, OFFICE_COLUMN_RUNS_ID),
																	   &isnull)));
		candidate->requested_at = DatumGetTimestampTz(slot_getattr(q->slot, attnum_in(q->heap, OFFICE_COLUMN_RUNS_REQUESTED_AT),
																   &isnull));
	}
}

/* The scan's statement: the candidates (ordered) into found, the stale agents into stale. */
static int
scan_candidates(Oid office, Datum agent, const Skips *skip_agents, const Skips *skip_runs,
				Candidate *found, Skips *stale)
{
	Snapshot   snapshot = statement_snapshot();
	Candidate  ready[2 * READY_LOOKS];
	AgentLooks looks;
	int		   nready = 0;
	int		   nfound = 0;

	memset(&looks, 0, sizeof(looks));
	if (agent != (Datum) 0)
	{
		ready[0].agent = agent;
		nready = 1;
	}
	else
	{
		read_ready_rows(office, snapshot, OFFICE_INDEX_AGENT_READY_HEAD, false, skip_agents, ready, &nready);
		read_ready_rows(office, snapshot, OFFICE_INDEX_AGENT_READY_DUE, true, skip_agents, ready, &nready);
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
	Oid				  types[1] = {TEXTARRAYOID};
	Datum			  values[1] = {PointerGetDatum(construct_array(agents->items, agents->n, TEXTOID, -1, false,
																   TYPALIGN_INT))};

	(void) run_kept(&plan, ANY_SCAN, "SELECT office._unready_agents($1)", 1, types, values, NULL, SPI_OK_SELECT, NULL);
}

/* The UPDATE of the candidate by its id: the claimed row (office.runs), or false. */
static bool
claim_candidate(Datum id, text *worker, Datum *row)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[2] = {TEXTOID, TEXTOID};
	Datum			  values[2] = {id, PointerGetDatum(worker)};
	char			  nulls[2] = {' ', worker == NULL ? 'n' : ' '};

	return run_kept(&plan, NO_SEQ_OR_BITMAP_SCAN,
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
}

/* DELETE FROM office.agent_ready WHERE agent_profile_id = agent */
static void
delete_ready_rows(Datum agent)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[1] = {TEXTOID};
	Datum			  values[1] = {agent};

	(void) run_kept(&plan, NO_SEQ_OR_BITMAP_SCAN,
					"DELETE FROM office.agent_ready r WHERE r.agent_profile_id OPERATOR(pg_catalog.=) $1",
					1, types, values, NULL, SPI_OK_DELETE, NULL);
}

/* The claimed row, a datum of office.runs, as the call's one result row. */
static void
return_row(FunctionCallInfo fcinfo, Datum row)
{
	ReturnSetInfo  *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTupleHeader header = DatumGetHeapTupleHeader(row);
	HeapTupleData	tuple;

	tuple.t_len = HeapTupleHeaderGetDatumLength(header);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = header;
	tuplestore_puttuple(rsinfo->setResult, &tuple);
}

Datum
office_claim_run(PG_FUNCTION_ARGS)
{
	text *worker = text_argument(fcinfo, 0, false);
	text *agent = text_argument(fcinfo, 1, true);
	Oid	  office;
	Skips skip_agents = {NULL, 0, 0};
	Skips skip_runs = {NULL, 0, 0};

	if (!short_text_ok(worker))
		return hand_on(fcinfo, "_claim_run_plpgsql");
	office = get_namespace_oid("office", false);
	/* a budget, cooldown or run cap; a queued run with a priority */
	if (index_has_entry(office, ON_INDEX(OFFICE_INDEX_WAKE_POLICIES_HOLDS), NULL, 0) ||
		index_has_entry(office, ON_INDEX(OFFICE_INDEX_RUN_QUEUED_PRIORITY), NULL, 0))
		return hand_on(fcinfo, "_claim_run_plpgsql");
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	for (;;)
	{
		Candidate found[READY_LOOKS];
		Skips	  stale = {NULL, 0, 0};
		int		  nfound = scan_candidates(office, PointerGetDatum(agent), &skip_agents, &skip_runs,
										   found, &stale);

		if (stale.n > 0)
		{
			unready_agents(&stale);
			for (int i = 0; i < stale.n; i++)
				skip_add(&skip_agents, stale.items[i]);
			/* a bounded call: see v_skip_bound of the PL/pgSQL definition */
			if (nfound == 0 && skip_agents.n >= OFFICE_CLAIM_SKIP_BOUND)
				break;
			if (nfound == 0)
				continue;
		}
		if (nfound == 0)
			break;
		for (int i = 0; i < nfound; i++)
		{
			text	*candidate_agent = DatumGetTextPP(found[i].agent);
			Snapshot snapshot;
			bool	 busy;
			Datum	 row;

			if (!try_lock(lock_id(OFFICE_LOCK_RUNS_CLAIM, &candidate_agent, 1)))
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
					try_lock(lock_id(OFFICE_LOCK_RUNS_READY, &candidate_agent, 1)))
					delete_ready_rows(found[i].agent);
				return_row(fcinfo, row);
				PG_RETURN_NULL();
			}
			/* locked by someone else or no longer queued: a new scan */
			skip_add(&skip_runs, found[i].id);
			break;
		}
	}
	PG_RETURN_NULL();
}

/* --- office.finish_run(run_id, attempt, worker_id) ------------------------ */
/*
 * 30_runs.sql's one statement, every operator qualified, planned and run
 * with its enable_seqscan off: claimed -> finished, only if still claimed
 * with this attempt, and by worker_id when one is given. Nothing to hand on:
 * a NULL run id or attempt matches no row, as there.
 */

Datum
office_finish_run(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[3] = {TEXTOID, INT4OID, TEXTOID};
	bool			  no_worker = PG_NARGS() < 3 || PG_ARGISNULL(2);
	Datum			  values[3] = {PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0),
					   PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1),
					   no_worker ? (Datum) 0 : PG_GETARG_DATUM(2)};
	char nulls[3] = {PG_ARGISNULL(0) ? 'n' : ' ', PG_ARGISNULL(1) ? 'n' : ' ', no_worker ? 'n' : ' '};
	bool finished;

	finished = run_kept(&plan, NO_SEQSCAN,
						"UPDATE office.runs r SET status = 'finished', finished_at = pg_catalog.now()"
						" WHERE r.id OPERATOR(pg_catalog.=) $1"
						" AND r.status COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) 'claimed'"
						" AND r.attempt OPERATOR(pg_catalog.=) $2"
						" AND ($3 IS NULL OR r.claimed_by OPERATOR(pg_catalog.=) $3)",
						3, types, values, nulls, SPI_OK_UPDATE, NULL);
	PG_RETURN_BOOL(finished);
}
