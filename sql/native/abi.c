/*
 * office native: the library's ABI version, for the handshake of
 * 95_native.sql. The install binds the native definitions only when it
 * equals office.schema_version(): a library built for another schema
 * version (a stale office.so beside new scripts) keeps the PL/pgSQL
 * definitions serving. OFFICE_ABI_VERSION is office.control's
 * default_version, passed by sql/Makefile, so the version is written once.
 */
#include "office.h"

#ifndef OFFICE_ABI_VERSION
#error "OFFICE_ABI_VERSION must be defined (sql/Makefile passes office.control's default_version)"
#endif

PG_FUNCTION_INFO_V1(office_abi_version);

Datum
office_abi_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(OFFICE_ABI_VERSION));
}
