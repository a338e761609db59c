/*
 * office native: office._ready_agents(), the readier of office.agent_ready.
 *
 * 30_runs.sql's trigger function, step for step; the readiness comment there
 * says why each step is there and why no claimable agent is left out. The two
 * looks are index scans of their own (the PL/pgSQL function's LIMIT 1 and
 * min() probes, which it keeps from other plans with enable_seqscan and
 * enable_bitmapscan off), each in a snapshot taken after the readiness lock,
 * as a statement of its own would be; the rare insert is a prepared
 * statement.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_ready_agents);

static void
insert_ready_row(Datum agent, Datum head)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum			  values[2] = {agent, head};

	(void) run_kept(&plan, ANY_SCAN, "INSERT INTO office.agent_ready (agent_profile_id, head_at) VALUES ($1, $2)",
					2, types, values, NULL, SPI_OK_INSERT, NULL);
}

/*
 * Any run inserted: its payload's and context_snapshot's bounds
 * (office._check_stored_json; runs_05_bounded in 30_runs.sql says why the
 * readiness trigger checks them). A value of at most 512 bytes cannot fail
 * them (json_too_small_to_fail), so the everyday run makes no call.
 */
static void
check_inserted_documents(HeapTuple row, Relation rel)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[2] = {JSONBOID, JSONBOID};
	bool			  payload_null;
	bool			  context_null;
	Datum			  values[2] = {column(row, rel, OFFICE_COLUMN_RUNS_PAYLOAD, &payload_null),
								   column(row, rel, OFFICE_COLUMN_RUNS_CONTEXT_SNAPSHOT, &context_null)};
	char			  nulls[2] = {payload_null ? 'n' : ' ', context_null ? 'n' : ' '};

	if ((payload_null || json_too_small_to_fail(values[0])) &&
		(context_null || json_too_small_to_fail(values[1])))
		return;
	(void) run_kept(&plan, ANY_SCAN,
					"SELECT office._check_stored_json('runs.payload', $1),"
					" office._check_stored_json('runs.context_snapshot', $2)",
					2, types, values, nulls, SPI_OK_SELECT, NULL);
}

Datum
office_ready_agents(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;
	Relation	 rel;
	HeapTuple	 new_row = NULL;
	HeapTuple	 old_row = NULL;
	bool		 on_agents;
	bool		 on_insert;
	Datum		 agents[2];
	int			 count = 0;
	Datum		 head = (Datum) 0;
	bool		 have_head = false;
	Oid			 office;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("office._ready_agents() is a trigger function")));
	rel = trigger->tg_relation;
	on_agents = strcmp(RelationGetRelationName(rel), OFFICE_TABLE_AGENT_PROFILES) == 0;
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
		bool isnull;

		agents[count++] = column(new_row, rel, OFFICE_COLUMN_AGENT_PROFILES_ID, &isnull);
	}
	else if (on_insert)
	{
		/* a run inserted queued (no WHEN clause): its requested_at is the head */
		bool isnull;

		check_inserted_documents(new_row, rel);
		if (!column_is(new_row, rel, OFFICE_COLUMN_RUNS_STATUS, OFFICE_RUN_QUEUED))
			return PointerGetDatum(NULL);
		agents[count++] = column(new_row, rel, OFFICE_COLUMN_RUNS_AGENT_PROFILE_ID, &isnull);
		head = column(new_row, rel, OFFICE_COLUMN_RUNS_REQUESTED_AT, &isnull);
		have_head = !isnull;
	}
	else
	{
		/* a run queued again, a claim that ended (no WHEN clause: any other update readies none) */
		bool  isnull;
		Datum old_agent = column(old_row, rel, OFFICE_COLUMN_RUNS_AGENT_PROFILE_ID, &isnull);

		if (new_row != NULL && column_is(new_row, rel, OFFICE_COLUMN_RUNS_STATUS, OFFICE_RUN_QUEUED))
		{
			Datum		new_agent = column(new_row, rel, OFFICE_COLUMN_RUNS_AGENT_PROFILE_ID, &isnull);
			bool		old_null;
			bool		new_null;
			Datum		old_retry = column(old_row, rel, OFFICE_COLUMN_RUNS_SCHEDULED_RETRY_AT, &old_null);
			Datum		new_retry = column(new_row, rel, OFFICE_COLUMN_RUNS_SCHEDULED_RETRY_AT, &new_null);
			TimestampTz old_at = DatumGetTimestampTz(column(old_row, rel, OFFICE_COLUMN_RUNS_REQUESTED_AT, &isnull));
			TimestampTz new_at = DatumGetTimestampTz(column(new_row, rel, OFFICE_COLUMN_RUNS_REQUESTED_AT, &isnull));

			if (!column_is(old_row, rel, OFFICE_COLUMN_RUNS_STATUS, OFFICE_RUN_QUEUED) ||
				!text_equal(old_agent, new_agent) || new_at < old_at ||
				old_null != new_null ||
				(!old_null && DatumGetTimestampTz(old_retry) != DatumGetTimestampTz(new_retry)))
				agents[count++] = new_agent;
		}
		if (column_is(old_row, rel, OFFICE_COLUMN_RUNS_STATUS, OFFICE_RUN_CLAIMED) &&
			(new_row == NULL || !column_is(new_row, rel, OFFICE_COLUMN_RUNS_STATUS, OFFICE_RUN_CLAIMED) ||
			 !text_equal(old_agent, column(new_row, rel, OFFICE_COLUMN_RUNS_AGENT_PROFILE_ID, &isnull))) &&
			(count == 0 || !text_equal(old_agent, agents[0])))
			agents[count++] = old_agent;
	}

	office = get_namespace_oid("office", false);
	for (int i = 0; i < count; i++)
	{
		text		  *agent = DatumGetTextPP(agents[i]);
		StringInfoData name;
		bool		   look;
		Datum		   listed;

		initStringInfo(&name);
		appendStringInfoString(&name, OFFICE_LOCK_RUNS_READY);
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
			have_head = least_of_agent(office, ON_INDEX(OFFICE_INDEX_RUN_AGENT_QUEUED), agents[i],
									   OFFICE_COLUMN_RUNS_REQUESTED_AT, NULL, &head);
			if (look && !have_head)
				continue;
		}
		/* the agent's due rows, oldest first: the first is the least head_at */
		if (look && have_head &&
			least_of_agent(office, ON_INDEX(OFFICE_INDEX_AGENT_READY_AGENT), agents[i],
						   OFFICE_COLUMN_AGENT_READY_HEAD_AT, OFFICE_COLUMN_AGENT_READY_DUE_AT, &listed) &&
			DatumGetTimestampTz(listed) <= DatumGetTimestampTz(head))
			continue;
		insert_ready_row(agents[i], have_head ? head : TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()));
	}
	return PointerGetDatum(NULL);
}
