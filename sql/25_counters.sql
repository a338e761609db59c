-- office: the counters behind office.dedup_stats and office.keyless_stats
-- (docs/api.md §6; the views themselves are in 80_observability.sql).
--
-- Counting must not make concurrent enqueues wait on one counter row, and it
-- must not add a lock that two transactions can take in opposite orders (a
-- bulk enqueue counts several labels; docs/api.md §7 promises that no two enqueue
-- calls deadlock). Each counter is striped by slot, and a transaction writes
-- only in slots it holds exclusively: office._counter_slot() takes a
-- transaction-scoped advisory lock on a free slot (trying, never waiting:
-- its backend's own pg_backend_pid() % 64 first, then the next ones). Two
-- live transactions therefore never touch one counter row, so counting never
-- waits and cannot deadlock, in any order of labels. The views sum the slots.
--
-- The tables are UNLOGGED: a transaction that writes nothing else (a windowed
-- dedup writes only its counter) then commits without waiting for a WAL
-- flush, so counting does not turn a read-only dedup into a durable write.
-- The price: after a crash (not after a clean restart) the counters start
-- again from zero, like any process-local metric would, and standbys see
-- them empty.
--
-- The label CHECKs compare with one array constant, not an IN list:
-- PostgreSQL reads a table's CHECKs again from their stored text at every
-- statement that writes it (every count), and an IN list is stored as one
-- node per element (0.4.0: 2.4 % of a deduped enqueue's instructions).

CREATE UNLOGGED TABLE office.dedup_counters (
    slot   int    NOT NULL,
    queue  text   NOT NULL CHECK (queue = ANY ('{runs,wakeup}'::text[])),
    reason text   NOT NULL,
    kind   text   NOT NULL CHECK (kind = ANY ('{windowed,durable,coalesced,guarded}'::text[])),
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
    cause  text   NOT NULL CHECK (cause = ANY ('{unresolved,by_design}'::text[])),
    total  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, reason, cause)
);
SELECT pg_catalog.pg_extension_config_dump('office.keyless_counters', '');
REVOKE ALL ON TABLE office.keyless_counters FROM PUBLIC;
COMMENT ON TABLE office.keyless_counters IS
    'Striped keyless-enqueue counters (one row per backend slot and label); read office.keyless_stats instead.';

-- The advisory locks of the slots live in their own space: the two-int form
-- of pg_try_advisory_xact_lock with this first key (no bigint-keyed lock of
-- office can equal a two-int one).
CREATE FUNCTION office._counter_slot() RETURNS int
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_first int := pg_backend_pid() % 64;
BEGIN
    FOR i IN 0..63 LOOP
        -- Re-taking a slot this transaction already holds succeeds at once.
        IF pg_try_advisory_xact_lock(1868981101, (v_first + i) % 64) THEN
            RETURN (v_first + i) % 64;
        END IF;
    END LOOP;
    -- More than 64 transactions counting at this moment: a slot of this
    -- backend's own (no two live backends share a pid), still never shared.
    RETURN 64 + pg_backend_pid();
END
$$;
COMMENT ON FUNCTION office._counter_slot() IS
    'Internal: a counter slot this transaction holds exclusively (a transaction-scoped advisory lock taken without waiting), so counting never waits on or deadlocks with another transaction.';
REVOKE EXECUTE ON FUNCTION office._counter_slot() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._counter_slot() TO office_admin;

CREATE FUNCTION office._count_dedup(queue text, reason text, kind text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.dedup_counters AS c (slot, queue, reason, kind, total)
    VALUES (office._counter_slot(), _count_dedup.queue, _count_dedup.reason, _count_dedup.kind, 1)
    ON CONFLICT (slot, queue, reason, kind) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_dedup(text, text, text) IS
    'Internal: counts one suppressed enqueue (queue runs|wakeup, kind windowed|durable|coalesced|guarded) in a slot this transaction holds (office._counter_slot).';
REVOKE EXECUTE ON FUNCTION office._count_dedup(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_dedup(text, text, text) TO office_admin;

CREATE FUNCTION office._count_keyless(reason text, cause text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.keyless_counters AS c (slot, reason, cause, total)
    VALUES (office._counter_slot(), _count_keyless.reason, _count_keyless.cause, 1)
    ON CONFLICT (slot, reason, cause) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_keyless(text, text) IS
    'Internal: counts one keyless enqueue reported with a cause (unresolved|by_design) in a slot this transaction holds (office._counter_slot).';
REVOKE EXECUTE ON FUNCTION office._count_keyless(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_keyless(text, text) TO office_admin;
