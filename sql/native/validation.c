/*
 * office native: the checks every write of office.runs makes,
 * office._check_short_text (05_validation.sql) and the CHECK function
 * office._run_row_valid (30_runs.sql).
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_run_row_valid);
PG_FUNCTION_INFO_V1(office_check_short_text);

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
	int		  bytes = VARSIZE_ANY_EXHDR(value);
	pg_wchar *chars = palloc((length + 1) * sizeof(pg_wchar));
	bool	  found = false;

	length = pg_mb2wchar_with_len(VARDATA_ANY(value), chars, bytes);
	for (int i = 0; i < length && !found; i++)
		found = (chars[i] >= 0x01 && chars[i] <= 0x1f) || (chars[i] >= 0x7f && chars[i] <= 0x9f);
	pfree(chars);
	return found;
}

/* Whether _check_short_text(what, value) passes value; NULL passes. */
bool
short_text_ok(text *value)
{
	int length;

	if (value == NULL)
		return true;
	length = pg_mbstrlen_with_len(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
	return length <= 200 && !has_control_character(value, length);
}

Datum
office_check_short_text(PG_FUNCTION_ARGS)
{
	text *value;
	int	  bytes;
	int	  length;

	if (PG_ARGISNULL(1))
		PG_RETURN_NULL();
	value = PG_GETARG_TEXT_PP(1);
	bytes = VARSIZE_ANY_EXHDR(value);
	length = pg_mbstrlen_with_len(VARDATA_ANY(value), bytes);
	if (length > 200)
	{
		char *head = text_to_cstring(value);

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

/*
 * office._json_depth_ok(value) of 05_validation.sql: at most 64 objects and
 * arrays nested in one another, the top-level value being the first.
 * enqueue_run (enqueue.c) hands a deeper payload on, to be refused there.
 * A container inside another takes at least 8 bytes of the value (its header
 * and its entry in the outer one), so a value of at most 8 * 64 bytes, the
 * varlena header included, cannot nest 65 deep: its depth is not walked for,
 * and it is not even detoasted.
 */
#define OFFICE_JSON_DEPTH 64

/* Whether value is too small to fail a document's bounds (depth, size): see above. */
bool
json_too_small_to_fail(Datum value)
{
	return toast_raw_datum_size(value) <= 8 * OFFICE_JSON_DEPTH;
}

bool
json_depth_ok(Datum value)
{
	Jsonb			  *document;
	JsonbIterator	  *iterator;
	JsonbValue		   item;
	JsonbIteratorToken token;
	int				   depth = 0;

	if (json_too_small_to_fail(value))
		return true;
	document = DatumGetJsonbP(value);
	iterator = JsonbIteratorInit(&document->root);
	while ((token = JsonbIteratorNext(&iterator, &item, false)) != WJB_DONE)
	{
		if (token == WJB_BEGIN_ARRAY || token == WJB_BEGIN_OBJECT)
		{
			/* a scalar at the top is an array of one, marked raw */
			if (!(token == WJB_BEGIN_ARRAY && item.val.array.rawScalar) && ++depth > OFFICE_JSON_DEPTH)
				return false;
		}
		else if (token == WJB_END_ARRAY || token == WJB_END_OBJECT)
			depth--;
	}
	return true;
}

/* The lineage columns' part of the runs CHECK: origin, chain_depth, priority. */
static Term
lineage_term(FunctionCallInfo fcinfo)
{
	Term result = TERM_TRUE;

	if (PG_ARGISNULL(4))
		result = term_and(result, TERM_NULL);
	else
	{
		text *origin = PG_GETARG_TEXT_PP(4);

		if (!(text_is(origin, OFFICE_ORIGIN_HUMAN) || text_is(origin, OFFICE_ORIGIN_AGENT) ||
			  text_is(origin, OFFICE_ORIGIN_SYSTEM)))
			result = TERM_FALSE;
	}
	if (PG_ARGISNULL(5))
		result = term_and(result, TERM_NULL);
	else if (PG_GETARG_INT32(5) < 0)
		result = TERM_FALSE;
	if (PG_ARGISNULL(6))
		result = term_and(result, TERM_NULL);
	else if (PG_GETARG_INT32(6) < OFFICE_PRIORITY_MIN || PG_GETARG_INT32(6) > OFFICE_PRIORITY_MAX)
		result = TERM_FALSE;
	return result;
}

/*
 * office._run_row_valid(status, reason, payload, idempotency_key, origin,
 * chain_depth, priority): the CHECK of office.runs, with 30_runs.sql's
 * three-valued result: status one of the five, reason not empty, payload an
 * object, idempotency_key NULL or 1 to 512 characters, origin one of the
 * three (equality is bytewise under every deterministic collation),
 * chain_depth at least 0, priority within its bounds.
 */
Datum
office_run_row_valid(PG_FUNCTION_ARGS)
{
	Term result = TERM_TRUE;

	if (PG_ARGISNULL(0))
		result = term_and(result, TERM_NULL);
	else
	{
		text *status = PG_GETARG_TEXT_PP(0);

		if (!(text_is(status, OFFICE_RUN_QUEUED) || text_is(status, OFFICE_RUN_CLAIMED) ||
			  text_is(status, OFFICE_RUN_FINISHED) || text_is(status, OFFICE_RUN_FAILED) ||
			  text_is(status, OFFICE_RUN_CANCELLED)))
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
		Jsonb *payload = (Jsonb *) PG_DETOAST_DATUM_SLICE(PG_GETARG_DATUM(2), 0,
														  sizeof(uint32));

		if (!JB_ROOT_IS_OBJECT(payload))
			result = TERM_FALSE;
	}
	if (!PG_ARGISNULL(3))
	{
		text *key = PG_GETARG_TEXT_PP(3);
		int	  bytes = VARSIZE_ANY_EXHDR(key);

		/* a character is at least a byte: count them only past 512 bytes */
		if (bytes == 0 ||
			(bytes > 512 && pg_mbstrlen_with_len(VARDATA_ANY(key), bytes) > 512))
			result = TERM_FALSE;
	}
	/* bound with 0.4.0's four arguments (by a script of another build): those only */
	if (PG_NARGS() >= 7)
		result = term_and(result, lineage_term(fcinfo));
	if (result == TERM_NULL)
		PG_RETURN_NULL();
	PG_RETURN_BOOL(result == TERM_TRUE);
}
