/*
 * office native: office._uuid_v7(), the ids of runs.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_uuid_v7);

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
