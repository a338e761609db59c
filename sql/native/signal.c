/*
 * office native: office._signal_runs(agent_profile_ids, run_ids), the
 * wake-up signal.
 *
 * 30_runs.sql's function, with its setting's values and error. The looks
 * (does the agent hold a claim; how many of its queued runs are due) are
 * index scans in one snapshot taken as its statement would be.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_signal_runs);

static void
notify_agent(Datum agent, bool isnull)
{
	/* pg_notify()'s own steps; a NULL payload is the empty one, as there */
	PreventCommandDuringRecovery("NOTIFY");
	Async_Notify("office_runs", isnull ? "" : TextDatumGetCString(agent));
}

/* array[1], as SQL subscripts it: NULL unless one-dimensional and in bounds */
static Datum
first_element(ArrayType *array, bool *isnull)
{
	int lower;

	*isnull = true;
	if (array == NULL || ARR_NDIM(array) != 1)
		return (Datum) 0;
	lower = ARR_LBOUND(array)[0];
	if (lower > 1 || lower + ARR_DIMS(array)[0] - 1 < 1)
		return (Datum) 0;
	return array_get_element(PointerGetDatum(array), 1, (int[]){1}, -1, -1, false,
							 TYPALIGN_INT, isnull);
}

typedef struct AgentGroup
{
	int first; /* index of the agent's first run */
	int runs;  /* how many runs of the call it has */
} AgentGroup;

typedef struct SortContext
{
	Datum *agents;
	bool  *nulls;
} SortContext;

/* NULLs together, then by bytes: GROUP BY's equality under the collation */
static int
compare_agents(const void *a, const void *b, void *arg)
{
	SortContext *context = (SortContext *) arg;
	int			 x = *(const int *) a;
	int			 y = *(const int *) b;

	if (context->nulls[x] || context->nulls[y])
	{
		if (context->nulls[x] && context->nulls[y])
			return x - y;
		return context->nulls[x] ? -1 : 1;
	}
	{
		text *tx = DatumGetTextPP(context->agents[x]);
		text *ty = DatumGetTextPP(context->agents[y]);
		int	  lx = VARSIZE_ANY_EXHDR(tx);
		int	  ly = VARSIZE_ANY_EXHDR(ty);
		int	  c = memcmp(VARDATA_ANY(tx), VARDATA_ANY(ty), Min(lx, ly));

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

/* office.notify: unset or '' is edge, on is every; another value 22023 */
NotifyMode
notify_mode(void)
{
	const char *mode = GetConfigOption("office.notify", true, false);

	if (mode == NULL || mode[0] == '\0' || strcmp(mode, "edge") == 0)
		return NOTIFY_EDGE;
	if (strcmp(mode, "every") == 0 || strcmp(mode, "on") == 0)
		return NOTIFY_EVERY;
	if (strcmp(mode, "off") != 0)
	{
		char *shown = pstrdup(mode);

		shown[pg_mbcharcliplen(shown, strlen(shown), 200)] = '\0';
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("setting office.notify = %s must be edge, every or off",
						quote_literal_cstr(shown))));
	}
	return NOTIFY_OFF;
}

/* The signal for one run just queued (the single-run case of _signal_runs). */
void
signal_run(Oid office, NotifyMode mode, Datum agent, bool agent_null, Datum run_id, bool run_null)
{
	if (mode == NOTIFY_OFF)
		return;
	if (mode == NOTIFY_EDGE && !agent_null)
	{
		Snapshot snapshot = statement_snapshot();
		bool	 quiet = agent_busy(office, agent, snapshot) ||
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
	NotifyMode mode = notify_mode();
	bool	   edge = mode == NOTIFY_EDGE;
	ArrayType *agents = PG_ARGISNULL(0) ? NULL : PG_GETARG_ARRAYTYPE_P(0);
	ArrayType *run_ids = PG_ARGISNULL(1) ? NULL : PG_GETARG_ARRAYTYPE_P(1);
	int		   count = agents ? ArrayGetNItems(ARR_NDIM(agents), ARR_DIMS(agents)) : 0;
	Oid		   office;
	Snapshot   snapshot;

	if (mode == NOTIFY_OFF || count == 0)
		PG_RETURN_VOID();
	office = get_namespace_oid("office", false);

	if (count == 1)
	{
		bool  agent_null;
		bool  run_null;
		Datum agent = first_element(agents, &agent_null);
		Datum run_id = first_element(run_ids, &run_null);

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
			int i = groups[g].first;

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
