-- office: the counters behind office.dedup_stats and office.keyless_stats
-- (API.md §6; the views themselves are in 80_observability.sql).
--
-- Counting must not make concurrent enqueues wait on one counter row. Each
-- counter is striped: a backend adds to the row of its own slot
-- (pg_backend_pid() % 64), so two enqueues only meet on a counter row when
-- their backends share a slot and count the same label at the same moment.
-- The views sum the slots.
--
-- The tables are UNLOGGED: a transaction that writes nothing else (a windowed
-- dedup writes only its counter) then commits without waiting for a WAL
-- flush, so counting does not turn a read-only dedup into a durable write.
-- The price: after a crash (not after a clean restart) the counters start
-- again from zero, like any process-local metric would, and standbys see
-- them empty.

CREATE UNLOGGED TABLE office.dedup_counters (
    slot   int    NOT NULL,
    queue  text   NOT NULL CHECK (queue IN ('runs', 'wakeup')),
    reason text   NOT NULL,
    kind   text   NOT NULL CHECK (kind IN ('windowed', 'durable', 'coalesced')),
    total  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, queue, reason, kind)
);
SELECT pg_catalog.pg_extension_config_dump('office.dedup_counters', '');
REVOKE ALL ON TABLE office.dedup_counters FROM PUBLIC;
COMMENT ON TABLE office.dedup_counters IS
    'Striped dedup/coalesce counters (one row per backend slot and label); read office.dedup_stats instead.';

CREATE UNLOGGED TABLE office.keyless_counters (
    slot   int    NOT NULL,
    reason text   NOT NULL,
    cause  text   NOT NULL CHECK (cause IN ('unresolved', 'by_design')),
    total  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, reason, cause)
);
SELECT pg_catalog.pg_extension_config_dump('office.keyless_counters', '');
REVOKE ALL ON TABLE office.keyless_counters FROM PUBLIC;
COMMENT ON TABLE office.keyless_counters IS
    'Striped keyless-enqueue counters (one row per backend slot and label); read office.keyless_stats instead.';

CREATE FUNCTION office._count_dedup(queue text, reason text, kind text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.dedup_counters AS c (slot, queue, reason, kind, total)
    VALUES (pg_backend_pid() % 64, _count_dedup.queue, _count_dedup.reason, _count_dedup.kind, 1)
    ON CONFLICT (slot, queue, reason, kind) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_dedup(text, text, text) IS
    'Internal: counts one suppressed enqueue (queue runs|wakeup, kind windowed|durable|coalesced) in this backend''s stripe.';
REVOKE EXECUTE ON FUNCTION office._count_dedup(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_dedup(text, text, text) TO office_admin;

CREATE FUNCTION office._count_keyless(reason text, cause text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.keyless_counters AS c (slot, reason, cause, total)
    VALUES (pg_backend_pid() % 64, _count_keyless.reason, _count_keyless.cause, 1)
    ON CONFLICT (slot, reason, cause) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_keyless(text, text) IS
    'Internal: counts one keyless enqueue reported with a cause (unresolved|by_design) in this backend''s stripe.';
REVOKE EXECUTE ON FUNCTION office._count_keyless(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_keyless(text, text) TO office_admin;
