-- office: argument validation shared by every capability.
--
-- An id of a workspace, agent, task or routine is 1-200 characters with no
-- ',', no ':' and no control character: those are the separators inside keys,
-- and an id containing one would let two different occurrences share a key
-- (API.md, Conventions). Functions that create an entity check its id here
-- (22023); a lookup by such an id simply finds nothing.

CREATE FUNCTION office._check_id(kind text, value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR length(value) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s id must not be empty', kind);
    END IF;
    IF length(value) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s id %s is longer than 200 characters (%s)',
                             kind, quote_literal(left(value, 40) || '...'), length(value));
    END IF;
    IF value ~ '[,:\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s id %s contains a '','', a '':'' or a control character',
                             kind, quote_literal(value));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_id(text, text) IS
    'Internal: returns value when it is a valid id of the given kind (1-200 characters, no comma, colon or control character), else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_id(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_id(text, text)
    TO office_producer, office_worker, office_reader, office_admin;
