/*
 * office native: office._count_dedup(queue, reason, kind), one suppression
 * counted.
 *
 * 25_counters.sql's function and its _counter_slot(): a slot this
 * transaction holds exclusively (a transaction-scoped advisory lock in the
 * two-int space 1868981101, tried without waiting, this backend's pid % 64
 * first; past 64, 64 + its pid), then the counter's insert or increment.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_count_dedup);

static int
counter_slot(void)
{
	int first = MyProcPid % 64;

	for (int i = 0; i < 64; i++)
	{
		int slot = (first + i) % 64;

		if (DatumGetBool(DirectFunctionCall2(pg_try_advisory_xact_lock_int4,
											 Int32GetDatum(1868981101), Int32GetDatum(slot))))
			return slot;
	}
	return 64 + MyProcPid;
}

/* labels: queue, reason, kind (a NULL one meets the column's NOT NULL) */
void
count_dedup(const NullableDatum *labels)
{
	static SPIPlanPtr plan = NULL;
	Oid				  types[4] = {INT4OID, TEXTOID, TEXTOID, TEXTOID};
	Datum			  values[4] = {Int32GetDatum(counter_slot())};
	char			  nulls[4] = {' '};

	for (int i = 0; i < 3; i++)
	{
		values[i + 1] = labels[i].value;
		nulls[i + 1] = labels[i].isnull ? 'n' : ' ';
	}
	(void) run_kept(&plan, ANY_SCAN,
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
