"""A hostile schema for the caller's search_path: schema evil shadows, with
identical signatures, functions and operators office's SQL uses
(tests/sql/test_hardening.py, tests/sql/test_native.py)."""

HOSTILE_PATH = "evil, public, pg_catalog"

# Objects in schema evil that shadow, with identical signatures, what the key
# builders use. Each returns something recognisably wrong.
HOSTILE_OBJECTS = r"""
CREATE SCHEMA evil;
CREATE FUNCTION evil.sha256(bytea) RETURNS bytea LANGUAGE sql IMMUTABLE
    AS $$ SELECT '\xdeadbeef'::bytea $$;
CREATE FUNCTION evil.encode(bytea, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-encode'::text $$;
CREATE FUNCTION evil.decode(text, text) RETURNS bytea LANGUAGE sql IMMUTABLE
    AS $$ SELECT '\x2a2a'::bytea $$;
CREATE FUNCTION evil.convert_to(text, name) RETURNS bytea LANGUAGE sql IMMUTABLE
    AS $$ SELECT '\x6576696c'::bytea $$;
CREATE FUNCTION evil.substr(bytea, integer, integer) RETURNS bytea LANGUAGE sql IMMUTABLE
    AS $$ SELECT '\x6576696c'::bytea $$;
CREATE FUNCTION evil.to_char(timestamp, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-to_char'::text $$;
CREATE FUNCTION evil.to_char(timestamptz, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-to_char'::text $$;
CREATE FUNCTION evil.array_to_string(anyarray, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-array_to_string'::text $$;
CREATE FUNCTION evil.string_to_array(text, text) RETURNS text[] LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY['evil:X']::text[] $$;
CREATE FUNCTION evil.regexp_replace(text, text, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-regexp'::text $$;
CREATE FUNCTION evil.floor(numeric) RETURNS numeric LANGUAGE sql IMMUTABLE
    AS $$ SELECT 42::numeric $$;
CREATE FUNCTION evil.array_ndims(anyarray) RETURNS integer LANGUAGE sql IMMUTABLE
    AS $$ SELECT 7 $$;
CREATE FUNCTION evil.isfinite(timestamptz) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT false $$;
CREATE FUNCTION evil.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE sql IMMUTABLE
    AS $$ SELECT $1[1] $$;
CREATE FUNCTION evil.agg_step(text, text, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-string_agg'::text $$;
CREATE AGGREGATE evil.string_agg(text, text) (SFUNC = evil.agg_step, STYPE = text);
CREATE FUNCTION evil.textcat(text, text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'evil-concat'::text $$;
CREATE OPERATOR evil.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.textcat);
CREATE FUNCTION evil.byteacat(bytea, bytea) RETURNS bytea LANGUAGE sql IMMUTABLE
    AS $$ SELECT '\x6576696c'::bytea $$;
CREATE OPERATOR evil.|| (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = evil.byteacat);
CREATE FUNCTION evil.texteq(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT false $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq);
CREATE FUNCTION evil.textne(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT true $$;
CREATE OPERATOR evil.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.textne);
CREATE FUNCTION evil.int84lt(bigint, integer) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT true $$;
CREATE OPERATOR evil.< (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = evil.int84lt);
"""
