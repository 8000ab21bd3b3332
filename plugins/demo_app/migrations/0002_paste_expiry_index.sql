-- Seed 002's paste expiry (blobgc_paste_expiry) walks the not-yet-expired pastes in (expires_at, short_code)
-- order, a batch at a time.
DROP INDEX app.paste_expiring_idx;
CREATE INDEX paste_expiring_idx ON app.paste (expires_at, short_code) WHERE status = 'NOT_EXPIRED';
