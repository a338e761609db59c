/*
 * office native: office._uuid_v7(), the ids of runs.
 */
#include "office.h"

PG_FUNCTION_INFO_V1(office_uuid_v7);

/*
 * The random bits of ids, drawn from pg_strong_random() a pool at a time: a
 * draw costs about 8 k instructions whatever its length (OpenSSL checks and
 * looks up its generator each time), 2 % of a fresh enqueue_run when every
 * id drew its own 8 bytes (docs/benchmarks.md, "ninth pass"). The pool is
 * this backend's, filled at its first id (never in the postmaster, so no
 * two processes share one), and each byte is handed out once.
 */
#define RANDOM_POOL_BYTES 4096

static uint8 random_pool[RANDOM_POOL_BYTES];
static int	 random_left = 0;

static void
random_bytes(uint8 *out, int n)
{
	if (random_left < n)
	{
		if (!pg_strong_random(random_pool, sizeof(random_pool)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random values")));
		random_left = sizeof(random_pool);
	}
	memcpy(out, random_pool + sizeof(random_pool) - random_left, n);
	random_left -= n;
}

/* digits lowercase hex digits of value, most significant first */
static char *
put_hex(char *out, uint64 value, int digits)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = digits - 1; i >= 0; i--)
	{
		out[i] = hex[value & 0xf];
		value >>= 4;
	}
	return out + digits;
}

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
	int64 us = GetCurrentTimestamp() +
			   (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	uint64	 ms = (uint64) (us / 1000);
	unsigned fraction = (unsigned) ((us % 1000) * 4096 / 1000);
	uint8	 random[8];
	char	 text[36];
	char	*at = text;

	random_bytes(random, sizeof(random));
	random[0] = (random[0] & 0x3f) | 0x80;
	at = put_hex(at, ms >> 16, 8);
	*at++ = '-';
	at = put_hex(at, ms & 0xffff, 4);
	*at++ = '-';
	at = put_hex(at, 0x7000 | fraction, 4);
	*at++ = '-';
	at = put_hex(at, ((uint64) random[0] << 8) | random[1], 4);
	*at++ = '-';
	for (int i = 2; i < 8; i++)
		at = put_hex(at, random[i], 2);
	Assert(at == text + sizeof(text));
	PG_RETURN_TEXT_P(cstring_to_text_with_len(text, sizeof(text)));
}
