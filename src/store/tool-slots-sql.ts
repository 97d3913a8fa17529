/*
 * The tool-slot store's SQL, both dialects side by side. Taking a slot is one statement: the lowest
 * slot below the limit that nobody holds under a live lease is inserted, or taken over if its lease
 * expired; of two takers of one slot, the conflict's re-check lets one win and the other gets no row.
 */

export const ACQUIRE = {
  postgres: `
INSERT INTO tool_slots (tool_name, slot, holder, expires_at)
SELECT $1, s, $2, oncely_now() + make_interval(secs => $4::double precision / 1000)
FROM generate_series(0, $3::integer - 1) AS s
WHERE NOT EXISTS (
  SELECT 1 FROM tool_slots t WHERE t.tool_name = $1 AND t.slot = s AND t.expires_at > oncely_now()
)
ORDER BY s
LIMIT 1
ON CONFLICT (tool_name, slot) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
  WHERE tool_slots.expires_at <= oncely_now()
RETURNING slot`,
  sqlite: `
WITH RECURSIVE slots(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM slots WHERE s + 1 < @limit)
INSERT INTO tool_slots (tool_name, slot, holder, expires_at)
SELECT @tool, s, @holder, @expiresAt FROM slots
WHERE NOT EXISTS (
  SELECT 1 FROM tool_slots t WHERE t.tool_name = @tool AND t.slot = slots.s AND t.expires_at > @now
)
ORDER BY s
LIMIT 1
ON CONFLICT (tool_name, slot) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
  WHERE tool_slots.expires_at <= @now
RETURNING slot`,
} as const;

/** Extends a held slot's lease; no row when it is no longer this holder's. */
export const RENEW = {
  postgres: `
UPDATE tool_slots SET expires_at = oncely_now() + make_interval(secs => $4::double precision / 1000)
WHERE tool_name = $1 AND slot = $2 AND holder = $3 AND expires_at > oncely_now()
RETURNING slot`,
  sqlite: `
UPDATE tool_slots SET expires_at = @expiresAt
WHERE tool_name = @tool AND slot = @slot AND holder = @holder AND expires_at > @now
RETURNING slot`,
} as const;

/**
 * Lets go of a held slot: free now (0 ms), or held until the given time (a request that may still
 * land). On PostgreSQL a slot freed now is told to the listening processes (`slot` on the wake-up
 * channel, on commit), so a call waiting for it elsewhere takes it at once instead of at its next look.
 */
export const RELEASE = {
  postgres: `
WITH released AS (
  UPDATE tool_slots SET expires_at = oncely_now() + make_interval(secs => $4::double precision / 1000)
  WHERE tool_name = $1 AND slot = $2 AND holder = $3
  RETURNING slot
)
SELECT pg_notify('oncely_wake', 'slot') FROM released WHERE $4::double precision = 0`,
  sqlite: `
UPDATE tool_slots SET expires_at = @expiresAt WHERE tool_name = @tool AND slot = @slot AND holder = @holder`,
} as const;

/** The slots of a tool held now, for operators and tests. */
export const HELD = {
  postgres: `SELECT slot, holder, expires_at FROM tool_slots WHERE tool_name = $1 AND expires_at > oncely_now() ORDER BY slot`,
  sqlite: `SELECT slot, holder, expires_at FROM tool_slots WHERE tool_name = ? AND expires_at > ? ORDER BY slot`,
} as const;
