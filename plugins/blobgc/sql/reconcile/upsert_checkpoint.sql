-- Advance a shard's checkpoint past a fully checked page and add the page's counts, in the page's transaction.
INSERT INTO blobgc.reconcile_checkpoint AS c (run_id, shard, start_after, inventory_phase, pages, keys_checked,
                                              orphans, orphan_bytes, too_young, unknown_keys, missing, done, scope,
                                              considered, accounted, first_eligible_at, waiting, waiting_sample)
VALUES (%(run_id)s, %(shard)s, %(start_after)s, %(inventory_phase)s, 1, %(keys)s, %(orphans)s, %(orphan_bytes)s,
        %(young)s, %(unknown)s, %(missing)s, %(done)s, %(scope)s, %(considered)s, %(accounted)s, %(first_eligible_at)s,
        %(waiting)s, %(waiting_sample)s::text[])
ON CONFLICT (run_id, shard) DO UPDATE SET
    start_after = excluded.start_after, inventory_phase = excluded.inventory_phase,
    pages = c.pages + 1, keys_checked = c.keys_checked + excluded.keys_checked, orphans = c.orphans + excluded.orphans,
    orphan_bytes = c.orphan_bytes + excluded.orphan_bytes, too_young = c.too_young + excluded.too_young,
    unknown_keys = c.unknown_keys + excluded.unknown_keys, missing = c.missing + excluded.missing,
    done = excluded.done, scope = coalesce(excluded.scope, c.scope), considered = c.considered + excluded.considered,
    accounted = c.accounted + excluded.accounted,
    first_eligible_at = least(c.first_eligible_at, excluded.first_eligible_at), waiting = c.waiting + excluded.waiting,
    waiting_sample = (c.waiting_sample || excluded.waiting_sample)[1:5], updated_at = now()
