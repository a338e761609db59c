/*
 * office native: looks at one agent, each an index scan in a snapshot the
 * caller takes: whether it holds a claim, whether it accepts runs, its due
 * queued runs.
 */
#include "office.h"

/* test's answer on the scan of index at the agent's entries, in snapshot */
static bool
look_at_agent(Oid office, const char *table, const char *index, Datum agent, Snapshot snapshot,
			  bool (*test)(OfficeScan *s))
{
	OfficeScan s;
	bool	   answer;

	scan_by_text(&s, office, table, index, agent, snapshot);
	answer = test(&s);
	scan_end(&s);
	return answer;
}

/* The agent holds a claim. */
bool
agent_busy(Oid office, Datum agent, Snapshot snapshot)
{
	return look_at_agent(office, ON_INDEX(OFFICE_INDEX_RUN_ONE_CLAIMED_PER_AGENT), agent, snapshot, scan_next);
}

/*
 * Whether the row a scan of agent_profiles_pkey found (if any) is an agent
 * whose status accepts runs (not _statuses_refusing_runs).
 */
bool
profile_accepts(OfficeScan *s)
{
	static const char *const refusing[] = OFFICE_AGENT_STATUSES_REFUSING_RUNS;
	bool					 isnull;
	Datum					 status;

	if (!scan_next(s))
		return false;
	status = slot_getattr(s->slot, attnum_in(s->heap, OFFICE_COLUMN_AGENT_PROFILES_STATUS), &isnull);
	return isnull || !text_is_one_of(DatumGetTextPP(status), refusing, lengthof(refusing));
}

/* The agent exists and accepts runs. */
bool
agent_accepts_runs(Oid office, Datum agent, Snapshot snapshot)
{
	return look_at_agent(office, ON_INDEX(OFFICE_INDEX_AGENT_PROFILES_PKEY), agent, snapshot, profile_accepts);
}

/*
 * The next due run of a scan of idx_run_agent_queued (an agent's queued runs,
 * oldest first) into s->slot: its scheduled_retry_at NULL or passed (now()),
 * its id none of the nskip of skip.
 */
bool
next_due_run(OfficeScan *s, const Datum *skip, int nskip)
{
	int			retry_attnum = attnum_in(s->heap, OFFICE_COLUMN_RUNS_SCHEDULED_RETRY_AT);
	int			id_attnum = attnum_in(s->heap, OFFICE_COLUMN_RUNS_ID);
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	while (scan_next(s))
	{
		bool  isnull;
		Datum retry = slot_getattr(s->slot, retry_attnum, &isnull);

		if (!isnull && DatumGetTimestampTz(retry) > now)
			continue;
		if (!text_in(slot_getattr(s->slot, id_attnum, &isnull), skip, nskip))
			return true;
	}
	return false;
}

/*
 * How many of the agent's queued runs are due (no scheduled_retry_at, or one
 * that has passed), counting no further than limit; a run with id except is
 * not counted, and when except is given but NULL none is (id <> NULL).
 */
int
agent_due_runs(Oid office, Datum agent, Snapshot snapshot, int limit,
			   bool has_except, Datum except, bool except_null)
{
	OfficeScan s;
	int		   count = 0;

	if (has_except && except_null)
		return 0;
	scan_by_text(&s, office, ON_INDEX(OFFICE_INDEX_RUN_AGENT_QUEUED), agent, snapshot);
	while (count < limit && next_due_run(&s, has_except ? &except : NULL, has_except ? 1 : 0))
		count++;
	scan_end(&s);
	return count;
}

/*
 * The least value of column over the agent's rows of the index (the index's
 * second column, so the first visible row has it), among those whose
 * only_null column is NULL when one is named; in a snapshot of its own.
 */
bool
least_of_agent(Oid office, const char *table, const char *index, Datum agent,
			   const char *column_name, const char *only_null, Datum *value)
{
	Snapshot   snapshot = statement_snapshot();
	OfficeScan s;
	int		   wanted;
	int		   nullable;
	bool	   found = false;
	bool	   isnull;

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
