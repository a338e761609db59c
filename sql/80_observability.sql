-- office: observability views (docs/api.md §6).
--
-- dedup_stats and keyless_stats sum the striped counters of 25_counters.sql;
-- queue_stats reads office.runs. Readers get SELECT on the views only.
--
-- A view is bound when it is created, under the installer's search_path, so
-- every function and operator is named in pg_catalog (docs/architecture.md,
-- principle 8): a planted public.count(text) is then never chosen.

CREATE VIEW office.dedup_stats AS
SELECT c.queue, c.reason, c.kind, pg_catalog.sum(c.total)::bigint AS total
  FROM office.dedup_counters c
 GROUP BY c.queue, c.reason, c.kind;
COMMENT ON VIEW office.dedup_stats IS
    'Suppressed enqueues by queue (runs|wakeup), reason and kind (windowed|durable|coalesced|guarded; coalesced and guarded are queue runs). Counters restart from zero after a crash.';
REVOKE ALL ON office.dedup_stats FROM PUBLIC;
GRANT SELECT ON office.dedup_stats TO office_reader, office_admin;

CREATE VIEW office.keyless_stats AS
SELECT c.reason, c.cause, pg_catalog.sum(c.total)::bigint AS total
  FROM office.keyless_counters c
 GROUP BY c.reason, c.cause;
COMMENT ON VIEW office.keyless_stats IS
    'Keyless enqueues reported with a cause, by reason and cause (unresolved|by_design). Counters restart from zero after a crash.';
REVOKE ALL ON office.keyless_stats FROM PUBLIC;
GRANT SELECT ON office.keyless_stats TO office_reader, office_admin;

CREATE VIEW office.queue_stats AS
SELECT s.status,
       pg_catalog.count(DISTINCT r.agent_profile_id)::bigint AS agents,
       pg_catalog.count(r.id)::bigint AS runs,
       pg_catalog.min(r.requested_at) AS oldest_requested_at
  FROM (VALUES (1, 'queued'), (2, 'claimed'), (3, 'finished'), (4, 'failed'), (5, 'cancelled'))
       AS s(ord, status)
  LEFT JOIN office.runs r ON r.status OPERATOR(pg_catalog.=) s.status
 GROUP BY s.ord, s.status
 ORDER BY s.ord;
COMMENT ON VIEW office.queue_stats IS
    'Runs per status (every status, zero included): distinct agents, runs, and the oldest requested_at.';
REVOKE ALL ON office.queue_stats FROM PUBLIC;
GRANT SELECT ON office.queue_stats TO office_reader, office_admin;
